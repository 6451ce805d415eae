"""A trial's checkpoint policy: full checkpoints every ``--checkpoint-period`` seconds of the trial's
epochs and at its last epoch; its best epoch's weights always kept; one full checkpoint left when it ends.

- **Full checkpoint** (``trainer.pt``: weights, optimiser, memory, normaliser and RNG state, for an exact
  resume) costs about 300 MB at ResNet50 scale. Written every epoch it is a fixed cost per epoch and, kept
  twice per trial, about 150 GB for a 200-trial sweep. A killed worker or driver resumes from the last one
  and loses at most one period of epochs.
- **Best weights** (``best_weights.pt`` in the trial's folder, beside its checkpoints): the model's weights
  at the epoch with the best value of the sweep's metric, whenever it improves, whatever the period. The
  copy to the CPU happens at once; the write runs in a background thread while the next epoch trains.
  Tune stops a trial (ASHA, the budget) or reuses its actor without waiting for the trial's thread, and the
  writer dies with the process, so the trainable's ``cleanup`` and ``reset_config`` first call
  :func:`finish_best_weights`; a data-parallel rank 0, which Tune cannot wait for, writes before reporting.
- **When a trial ends** (completed or stopped by the scheduler), :class:`KeepLatestCheckpoint` deletes all
  but its newest full checkpoint. While it runs, Tune keeps two (``tune.sweep.KEEP_CHECKPOINTS``: a killed
  driver's last snapshot may still name the older one). Under population-based training every checkpoint
  is kept until the sweep ends (an exploit may restore any trial's last-perturbation checkpoint), then pruned.
"""
from __future__ import annotations

import io
import math
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import pyarrow.fs as pafs
from ray.tune import Callback

from tune.results.parquet import finite
from xbm.training.checkpoint import CheckpointWriter, improves

from analysis.location import Folder

BEST_WEIGHTS = "best_weights.pt"
TRIAL_STATE = "trial.json"  # in each full checkpoint: the policy's own state (best so far, period clock)
DEFAULT_PERIOD_S = 600.0


def storage_uri(fs: pafs.FileSystem, path: str) -> str:
    """A path on ``fs`` as a URI a user can pass back (``s3://bucket/...``; local paths stay paths)."""
    scheme = {"s3": "s3", "gcs": "gs", "hdfs": "hdfs"}.get(fs.type_name)
    return f"{scheme}://{path.lstrip('/')}" if scheme else path


@dataclass
class CheckpointClock:
    """Due every ``period_s`` seconds of epochs (0: every epoch), and at the last epoch."""

    period_s: float = DEFAULT_PERIOD_S
    since_s: float = 0.0

    def due(self, epoch_seconds: float, last: bool) -> bool:
        self.since_s += epoch_seconds
        if last or self.since_s >= self.period_s:
            self.since_s = 0.0
            return True
        return False


class BestWeights:
    """The weights of the best epoch so far by ``mode`` (``max`` | ``min``), written to ``storage`` as
    :data:`BEST_WEIGHTS`; ``value`` / ``epoch`` say which, ``uri`` where (None before the first). The copy to the
    CPU happens at once, the write in the background (``xbm.training.checkpoint.CheckpointWriter``)."""

    def __init__(self, storage: Folder, uri: str, mode: str) -> None:
        self.storage, self.folder_uri, self.mode = storage, uri.rstrip("/"), mode
        self.value: Optional[float] = None
        self.epoch: Optional[int] = None
        self._files = CheckpointWriter()
        # a write started and its entry in _PENDING, together: the actor's clean-up may wait meanwhile
        self._lock = threading.Lock()

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
        value, epoch = float(value) if finite(value) else math.nan, int(epoch)
        payload = {"model": model.state_dict(), "epoch": epoch, "value": value, **about}
        with self._lock:   # one write at a time, in epoch order: save waits for the one before (and raises its error)
            self._files.save(payload, f"{self.folder_uri}/{BEST_WEIGHTS}", write=self._write)
            self.value, self.epoch = value, epoch
            _PENDING.add(self)
        return True

    def _write(self, payload: dict) -> None:
        import torch

        buffer = io.BytesIO()
        torch.save(payload, buffer)
        self.storage.write_bytes(BEST_WEIGHTS, buffer.getvalue())

    def wait(self) -> None:
        """Block until the pending write is done; re-raise its error, naming the file. The trial's thread and
        the actor's ``cleanup`` may both wait."""
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


class KeepLatestCheckpoint(Callback):
    """When a trial completes (its budget, or stopped by the scheduler), delete every full checkpoint of it
    but the newest. Failed trials keep theirs: ``resume`` may restart them. ``at_end``: prune every completed
    trial when the sweep ends instead (population-based training may still restore a finished trial's older
    checkpoint into another trial until then)."""

    def __init__(self, at_end: bool = False) -> None:
        self.at_end = at_end

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        if not self.at_end:
            _prune(trial)

    def on_experiment_end(self, trials, **info) -> None:
        if self.at_end:
            for trial in trials:
                if trial.status == "TERMINATED":
                    _prune(trial)


def _prune(trial) -> None:
    storage = getattr(trial, "storage", None)
    if storage is not None:
        prune_checkpoints(storage.storage_filesystem, storage.trial_fs_path)


def prune_checkpoints(fs: pafs.FileSystem, trial_folder: str, keep: int = 1) -> list[str]:
    """Delete all but the ``keep`` newest ``checkpoint_<n>`` folders of ``trial_folder``; returns the deleted."""
    infos = fs.get_file_info(pafs.FileSelector(trial_folder, allow_not_found=True))
    folders = sorted(i.path for i in infos if i.type == pafs.FileType.Directory and i.base_name.startswith("checkpoint_"))
    doomed = folders[:-keep] if keep else folders
    for path in doomed:
        fs.delete_dir(path)
    return doomed
