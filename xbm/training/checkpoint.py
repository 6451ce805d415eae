"""Checkpoint files: reading a saved ``Trainer.state_dict()`` (checkpoint.pt) so that a bad file is named, and
writing one while training goes on (:class:`CheckpointWriter`)."""
from __future__ import annotations

import copy
import os
import threading
from pathlib import Path
from typing import Any

import torch

from xbm.errors import BadCheckpointError


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


def cpu_copy(value: Any) -> Any:
    """``value`` with every tensor copied to the CPU (detached; a CPU tensor cloned) and every other leaf
    deep-copied, through dicts, lists and tuples: a snapshot that the originals' in-place updates (the next
    optimiser step, the memory's next enqueue) cannot reach. Tensors that view one storage are copied apart,
    which ``torch.save`` would have kept shared: a trainer's state holds no such views (its buffers, weights
    and optimiser moments are each their own)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return type(value)((k, cpu_copy(v)) for k, v in value.items())   # an OrderedDict stays one
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(cpu_copy(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(cpu_copy(v) for v in value)
    return copy.deepcopy(value)


class CheckpointWriter:
    """``save(state, path)`` copies ``state``'s tensors to the CPU at once (:func:`cpu_copy`) and writes the file
    in a background thread, through ``<path>.tmp`` and an atomic rename, so ``path`` always holds a whole
    checkpoint. Only the copy runs between two epochs: on an H100 a ResNet50 ``Trainer.state_dict()`` (weights,
    AdamW's moments, the memory: about 300 MB) took 0.37-0.50 s to ``torch.save`` after every epoch, half to
    three quarters of a 2,000-image training pass (docs/trainer.md, "On a GPU").

    One write per path at a time: a second ``save`` to a path first waits for the one before, so an older
    state never lands last and one snapshot per path at most is held in memory. A failed write is raised, as
    an ``OSError`` naming the file, by the next ``save`` to its path or by :meth:`wait`, which blocks until
    every write has landed: call it before the process ends (the threads are daemons, and a write cut off
    leaves only its ``.tmp``)."""

    def __init__(self) -> None:
        self._writes: dict[Path, threading.Thread] = {}
        self._errors: dict[Path, BaseException] = {}

    def save(self, state: Any, path) -> None:
        path = Path(path)
        self._finish(path)
        snapshot = cpu_copy(state)
        thread = threading.Thread(target=self._write, args=(snapshot, path), daemon=True, name=f"save {path.name}")
        self._writes[path] = thread
        thread.start()

    def _write(self, snapshot: Any, path: Path) -> None:
        try:
            tmp = path.with_name(path.name + ".tmp")
            torch.save(snapshot, tmp)
            os.replace(tmp, path)
        except BaseException as exc:  # raised in the caller's thread by _finish
            self._errors[path] = exc

    def _finish(self, path: Path) -> None:
        thread = self._writes.pop(path, None)
        if thread is not None:
            thread.join()
        error = self._errors.pop(path, None)
        if error is not None:
            raise OSError(f"could not write the checkpoint {path}: {type(error).__name__}: {error}") from error

    def wait(self) -> None:
        """Block until every pending write has landed; raise the first that failed."""
        paths = list(self._writes)
        for thread in [self._writes[p] for p in paths]:
            thread.join()
        for path in paths:
            self._finish(path)
