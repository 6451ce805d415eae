"""Checkpoint files: reading a saved ``Trainer.state_dict()`` (checkpoint.pt) so that a bad file is named, and
writing one while training goes on (:class:`CheckpointWriter`)."""
from __future__ import annotations

import copy
import functools
import math
import numbers
import os
import threading
from pathlib import Path
from typing import Any, Callable, Optional

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


def improves(value: Any, best: Optional[float], mode: str = "max") -> bool:
    """Whether ``value`` makes a new best epoch under ``mode`` (``max`` | ``min``): a real, finite number (not a
    bool, None or NaN) strictly better than ``best``, or any such number while ``best`` is None. The one rule of
    ``xbm-tune train``'s and a sweep trial's best weights: a tie keeps the earlier epoch."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', but got {mode!r}")
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
        return False
    return best is None or (value > best if mode == "max" else value < best)


def cpu_copy(value: Any, buffers: "HostBuffers") -> Any:
    """``value`` with every tensor copied into ``buffers``' host memory (detached; a CPU tensor copied too) and
    every other leaf deep-copied, through dicts, lists and tuples: a snapshot that the originals' in-place
    updates (the next optimiser step, the memory's next enqueue) cannot reach. Tensors that view one storage
    are copied apart, which ``torch.save`` would have kept shared: a trainer's state holds no such views (its
    buffers, weights and optimiser moments are each their own). A CUDA tensor's copy is only queued
    (:meth:`HostBuffers.snapshot` gives the events it is whole after)."""
    if isinstance(value, torch.Tensor):
        return buffers.copy(value)
    if isinstance(value, dict):
        return type(value)((k, cpu_copy(v, buffers)) for k, v in value.items())   # an OrderedDict stays one
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(cpu_copy(v, buffers) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(cpu_copy(v, buffers) for v in value)
    return copy.deepcopy(value)


class HostBuffers:
    """The CPU tensors one file's snapshots are copied into, kept from one save to the next: the i-th tensor of
    a state reuses the i-th buffer when shape, stride and dtype match (a trainer's state keeps them from epoch
    to epoch), else a new one is allocated. A CUDA tensor's buffer is pinned and its copy queued on the
    tensor's current stream (``non_blocking``): the caller goes on at once, later kernels on that stream (the
    next optimiser step) run after the copy, and :meth:`snapshot` gives the events a reader waits on. Each
    ``.to("cpu")`` into fresh pageable memory instead waited for its own transfer, about a thousand of them
    for a ResNet50's weights and AdamW's moments (pageable transfers also run slower than pinned ones).

    Not torch.distributed.checkpoint's stagers: they copy whole storages (a view would carry all of its base)
    and key their cache on storage identity, through a private module. A snapshot must not be read after the
    next :meth:`snapshot`: :class:`CheckpointWriter` lets a file's next save start only once its last write has
    landed."""

    def __init__(self) -> None:
        self._buffers: list[tuple[tuple, torch.Tensor, bool]] = []   # (the source's layout, buffer, pinned)
        self._next = 0
        self._devices: set[torch.device] = set()

    def snapshot(self, state: Any) -> tuple[Any, list]:
        """``state`` copied into these buffers (:func:`cpu_copy`, the i-th tensor into the i-th buffer) and one
        CUDA event per device it copied from, recorded after its copies: the snapshot is whole once they have
        completed. Buffers it did not use (a state that shrank) are let go."""
        self._next, self._devices = 0, set()
        copied = cpu_copy(state, self)
        del self._buffers[self._next:]
        events = []
        for device in self._devices:
            event = torch.cuda.Event(blocking=True)   # the write thread sleeps on it, not spins beside the loaders
            event.record(torch.cuda.current_stream(device))
            events.append(event)
        return copied, events

    def copy(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor, index = tensor.detach(), self._next
        self._next += 1
        layout = (tensor.shape, tensor.dtype, tensor.stride(), tensor.is_cuda)
        if index < len(self._buffers) and self._buffers[index][0] == layout:
            _, buffer, pinned = self._buffers[index]
        else:
            buffer, pinned = _host_buffer(tensor, pin=tensor.is_cuda)
            self._buffers[index:index + 1] = [(layout, buffer, pinned)]
        buffer.copy_(tensor, non_blocking=pinned)
        if pinned:
            self._devices.add(tensor.device)
        return buffer

    @property
    def nbytes(self) -> int:
        """Host memory held, in bytes."""
        return sum(buffer.numel() * buffer.element_size() for _, buffer, _ in self._buffers)


def _host_buffer(tensor: torch.Tensor, pin: bool) -> tuple[torch.Tensor, bool]:
    """An empty CPU tensor laid out as ``tensor`` (channels-last weights stay a plain memcpy), pinned when asked
    and possible: a host that cannot pin (a locked-memory limit) still gets its checkpoint, copied blocking."""
    if pin:
        try:
            return torch.empty_like(tensor, device="cpu", pin_memory=True), True
        except RuntimeError:
            pass
    return torch.empty_like(tensor, device="cpu"), False


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
