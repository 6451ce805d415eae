"""``best_weights.pt``: the model's weights at the epoch with the best value of a metric so far, written whenever
it improves, for ``xbm-tune train`` (in its output folder) and a sweep trial (in its trial folder, beside its
checkpoints: ``tune.trial.checkpoints``) alike; ``xbm-tune export`` reads either.

The file holds ``{"model", "epoch", "value", **about}``: ``about`` is what the caller saves with the weights (the
run's ``config``, the ``metric``'s name, the data set's ``preprocessing``). The copy to the CPU happens at once;
the write runs in a background thread while the next epoch trains (:class:`xbm.training.checkpoint.CheckpointWriter`).
The writer dies with the process, so whoever ends it early (a Ray actor's clean-up) first calls
:func:`finish_best_weights`.
"""
from __future__ import annotations

import functools
import io
import math
import threading
import warnings
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol

import torch

from xbm.training.checkpoint import CheckpointWriter, improves

BEST_WEIGHTS = "best_weights.pt"


class BytesStorage(Protocol):
    """A folder that replaces a file by bytes atomically (``analysis.location.Folder``: a local folder or S3)."""

    def write_bytes(self, relative: str, payload: bytes) -> None: ...


class BestWeights:
    """The weights of the best epoch so far by ``mode`` (``max`` | ``min``), written as :data:`BEST_WEIGHTS` in the
    folder ``uri``: through ``storage`` when given (a sweep's storage, which may be S3), else to the local path
    through a temporary file and an atomic rename (:meth:`in_folder`). ``value`` / ``epoch`` say which epoch,
    ``uri`` where (None before the first)."""

    def __init__(self, storage: Optional[BytesStorage], uri: str, mode: str = "max") -> None:
        self.storage, self.folder_uri, self.mode = storage, str(uri).rstrip("/"), mode
        self.value: Optional[float] = None
        self.epoch: Optional[int] = None
        self._files = CheckpointWriter()
        # a write started and its entry in _PENDING, together: the actor's clean-up may wait meanwhile
        self._lock = threading.Lock()

    @classmethod
    def in_folder(cls, folder: Path | str, mode: str = "max") -> "BestWeights":
        """Best weights written to a local folder (``xbm-tune train``'s output folder)."""
        return cls(None, str(folder), mode)

    @property
    def uri(self) -> Optional[str]:
        return f"{self.folder_uri}/{BEST_WEIGHTS}" if self.epoch is not None else None

    def better(self, value: Any) -> bool:
        return improves(value, self.value, self.mode)

    def offer(self, epoch: int, value: Any, model, about: Mapping[str, Any], always: bool = False) -> bool:
        """Keep ``model``'s weights if ``value`` beats the best so far (or ``always``: the latest epoch, for a run
        with nothing held out to select on); ``about`` (config, metric name) is saved with them. Returns whether
        they were kept."""
        if not (always or self.better(value)):
            return False
        value, epoch = float(value) if improves(value, None) else math.nan, int(epoch)
        payload = {"model": model.state_dict(), "epoch": epoch, "value": value, **about}
        path = f"{self.folder_uri}/{BEST_WEIGHTS}"
        with self._lock:   # one write at a time, in epoch order: save waits for the one before (and raises its error)
            if self.storage is None:
                self._files.save(payload, Path(path))
            else:
                self._files.save(payload, path, write=functools.partial(_write_to, self.storage))
            self.value, self.epoch = value, epoch
            _PENDING.add(self)
        return True

    def wait(self) -> None:
        """Block until the pending write is done; re-raise its error, naming the file. The run's thread and a Ray
        actor's clean-up may both wait."""
        try:
            self._files.wait()
        finally:
            with self._lock:
                if not self._files.pending():
                    _PENDING.discard(self)

    def state(self) -> dict:
        return {"value": self.value, "epoch": self.epoch}

    def load_state(self, state: Mapping[str, Any]) -> None:
        value = state.get("value")
        self.value = None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)
        self.epoch = state.get("epoch")


def _write_to(storage: BytesStorage, payload: dict) -> None:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    storage.write_bytes(BEST_WEIGHTS, buffer.getvalue())


_PENDING: set[BestWeights] = set()  # this process's best weights with a write not yet waited for


def finish_best_weights() -> None:
    """Wait for every best-weights write this process started: a trial's row names the file as soon as the
    epoch is reported, so the write must land before Tune ends or reuses the actor. A failed write is
    said, not raised: the trial has ended."""
    while _PENDING:  # the trial's thread may still start one (a stop mid-epoch)
        for best in list(_PENDING):
            try:
                best.wait()
            except OSError as exc:
                warnings.warn(str(exc), stacklevel=2)
