"""Checkpoint files: reading a saved ``Trainer.state_dict()`` (checkpoint.pt) so that a bad file is named, and
writing one while training goes on (:class:`CheckpointWriter`)."""
from __future__ import annotations

import functools
import math
import numbers
import os
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from xbm.errors import BadCheckpointError
from xbm.training.host_buffers import HostBuffers


def load_checkpoint(path) -> dict[str, Any]:
    """The state in ``path``, read with ``weights_only=True`` (the trainer's state is tensors and plain
    values, xbm.training.rng) onto the CPU. A missing file raises FileNotFoundError; a truncated or corrupt
    one :class:`BadCheckpointError` naming it (torch's own errors, e.g. "PytorchStreamReader failed reading
    zip archive", do not)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise BadCheckpointError(path, f"{type(exc).__name__}: {exc}") from exc


def improves(value: Any, best: Optional[float], mode: str = "max") -> bool:
    """Whether ``value`` makes a new best epoch under ``mode`` (``max`` | ``min``): a real, finite number (not a
    bool, None or NaN) strictly better than ``best``, or any such number while ``best`` is None. The one rule of
    ``xbm-tune train``'s and a sweep trial's best weights: a tie keeps the earlier epoch."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', but got {mode!r}")
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
        return False
    return best is None or (value > best if mode == "max" else value < best)


class CheckpointWriter:
    """``save(state, path)`` copies ``state``'s tensors to the CPU at once (into the file's
    :class:`HostBuffers`: from a GPU the copies are only queued) and writes the file in a background thread,
    through ``<path>.tmp`` and an atomic rename, so ``path`` always holds a whole checkpoint. Only the copy runs
    between two epochs: on an H100 a ResNet50 ``Trainer.state_dict()`` (weights, AdamW's moments, the memory:
    about 300 MB) took 0.37-0.50 s to ``torch.save`` after every epoch, half to three quarters of a
    2,000-image training pass (docs/trainer.md, "On a GPU"). ``save(state, name, write)`` lands the snapshot
    with ``write(snapshot)`` instead (a sweep's storage, which may be S3), ``name`` naming it; ``write`` must
    not keep the snapshot's tensors once it returns (the file's next save reuses their memory). Each file
    holds one state's worth of host memory (pinned from a GPU) from its first save until the writer goes.

    One write per path at a time: a second ``save`` to a path first waits for the one before, so an older
    state never lands last and one snapshot per path at most is held in memory. A failed write is raised, as
    an ``OSError`` naming the file, by the next ``save`` to its path or by :meth:`wait`, which blocks until
    every write has landed: call it before the process ends (the threads are daemons, and a write cut off
    leaves only its ``.tmp``). Two threads may save and wait at once (a trial's thread, its actor's clean-up)."""

    def __init__(self) -> None:
        self._writes: dict[Any, threading.Thread] = {}
        self._errors: dict[Any, BaseException] = {}
        self._buffers: dict[Any, HostBuffers] = {}   # per file: its last write holds them until it lands
        self._lock = threading.Lock()

    def save(self, state: Any, path, write: Optional[Callable[[Any], None]] = None) -> None:
        key = Path(path) if write is None else path
        self._finish(key)   # before the copy: the last write to this file may still read its buffers
        with self._lock:
            buffers = self._buffers.setdefault(key, HostBuffers())
        snapshot, copied = buffers.snapshot(state)
        thread = threading.Thread(target=self._write, args=(key, write or functools.partial(_write_file, key),
                                                            snapshot, copied),
                                  daemon=True, name=f"save {Path(str(key)).name}")
        with self._lock:   # registered and started together: another thread's wait() never joins it unstarted
            self._writes[key] = thread
            thread.start()

    def pending(self) -> bool:
        """Whether a write has not yet been waited for."""
        with self._lock:
            return bool(self._writes)

    def _write(self, key: Any, write: Callable[[Any], None], snapshot: Any, copied: list) -> None:
        try:
            for event in copied:   # the queued device-to-host copies
                event.synchronize()
            write(snapshot)
        except BaseException as exc:  # raised in the caller's thread by _finish
            with self._lock:
                self._errors[key] = exc

    def _finish(self, key: Any) -> None:
        with self._lock:
            thread = self._writes.get(key)
        if thread is not None:
            thread.join()
        with self._lock:
            if thread is not None and self._writes.get(key) is thread:   # not a newer write saved meanwhile
                del self._writes[key]
            error = self._errors.pop(key, None)
        if error is not None:
            raise OSError(f"could not write {key}: {type(error).__name__}: {error}") from error

    def wait(self) -> None:
        """Block until every pending write has landed, a write saved meanwhile by another thread included;
        then raise the first that failed."""
        failed: Optional[OSError] = None
        while True:
            with self._lock:
                keys = list(self._writes)
            if not keys:
                break
            for key in keys:
                try:
                    self._finish(key)
                except OSError as exc:
                    failed = failed or exc
        if failed is not None:
            raise failed


def _write_file(path: Path, snapshot: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(snapshot, tmp)
    os.replace(tmp, path)
