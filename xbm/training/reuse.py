"""Results a node computes once and later runs reuse: the references and the warm-up.

An ASHA sweep's trials mostly differ in normaliser and memory keys, which neither the references (the
untrained model and the raw inputs on the selection split) nor the head-only warm-up reads. Every trial
paid both before its first epoch; with a reuse folder the first run on a node with given inputs computes
them and stores the result, and later runs with the same inputs read it. A reused result is bit-identical
to a fresh one: the warm-up's entry holds every part of the trainer state it changes (:data:`WARMUP_FIELDS`,
RNG states included), restored through ``Trainer.load_state_dict``.

Key: SHA-256 of
- the config without the keys the result cannot read (:data:`REFERENCES_IGNORES`, :data:`WARMUP_IGNORES`:
  lists of what does *not* matter, so a newly added key counts by default);
- the code: :data:`REUSE_FORMAT`, every ``xbm/**/*.py`` source and the versions of the libraries the numbers
  depend on (:func:`code_fingerprint`);
- the resolved runtime (device, autocast dtype, memory format; the warm-up: the loader's workers) and the
  data set's splits (indices and labels: ``Trainer(cfg, splits=...)`` may get other data than ``cfg`` names);
- the trainer state the computation starts from (references: the untrained weights; warm-up: every
  :data:`WARMUP_FIELDS` part, RNG states included). A result is only ever reused from the very state a
  fresh run would have computed it from; an input the lists above miss makes a miss, never a wrong result.

Entries: ``<folder>/<kind>-<key>.pt``, written atomically (temp file, then ``os.replace``) while holding
``<kind>-<key>.pt.lock`` (``filelock``), so a second run with the same key waits for the first and reads its
result. An unreadable entry is computed again, with a warning naming the file.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tempfile
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
from filelock import FileLock, Timeout

from xbm.training.loaders import start_persistent_workers
from xbm.training.rng import rng_state

log = logging.getLogger(__name__)

# Raise when the layout of an entry or the meaning of a key changes: older entries are then never read.
REUSE_FORMAT = 1
DEFAULT_FOLDER = Path(tempfile.gettempdir()) / "xbm-tune-reuse"
# Libraries whose version can change the numbers (decoding, models, losses, k-NN search).
LIBRARIES = ("torch", "torchvision", "numpy", "timm", "pytorch-metric-learning", "faiss-cpu", "pillow")

# Config keys (a trailing "." = every key under it) the result cannot depend on.
# The warm-up trains the head with its own SGD and the objective's in-batch loss (no miner, no memory):
# the main optimiser and schedule, the memory, the normaliser and the miner come after it; the epoch count,
# which epochs are evaluated and on what, where the decoded images are cached and when main
# epochs' passes are drawn change nothing in it.
WARMUP_IGNORES = ("memory.", "normaliser.", "miner.", "lr", "weight_decay", "lr_step", "lr_gamma", "optimizer",
                  "momentum", "nesterov", "schedule", "min_lr", "milestones", "warmup_lr_epochs", "epochs",
                  "evaluate_test", "eval_every", "eval_ks", "eval_nmi", "image_cache", "prefetch_next_epoch")
# The references embed the selection split with the untrained model and read the raw inputs: the training
# loop's keys (batches, losses, the objective's options, clipping, warm-up length, loader workers, the
# data-parallel workers and sync_bn: rank 0 measures them in eval mode, where a SyncBatchNorm is a BatchNorm)
# do not reach them either. ``objective`` stays: it builds next to the model.
REFERENCES_IGNORES = WARMUP_IGNORES + ("loss.", "moco.", "neighbours.", "warmup_epochs", "batch_size",
                                       "samples_per_class", "clip_grad", "num_workers", "workers", "sync_bn")
# The parts of Trainer.state_dict() the warm-up changes (tests/xbm/training/test_reuse.py diffs them).
WARMUP_FIELDS = ("model", "warmup_optimizer", "scaler", "sampler_labels", "objective", "passes", "rng",
                 "warmup_done")
# Those of them that are module state dicts (name -> tensor): stored as the entries the warm-up changed.
MODULE_FIELDS = ("model", "objective")


def ignored(key: str, ignores: tuple[str, ...]) -> bool:
    return any(key.startswith(name) if name.endswith(".") else key == name for name in ignores)


def default_folder(name: str = "") -> str:
    """``<system temp>/xbm-tune-reuse[/name]``: per node, as the system temp dir is."""
    return str(DEFAULT_FOLDER / name if name else DEFAULT_FOLDER)


class Reuse:
    """Computes through the entries in ``folder``; ``None``: computes every time, stores nothing."""

    def __init__(self, folder: Optional[str] = None) -> None:
        self.folder = Path(folder) if folder else None

    def references(self, trainer, compute: Callable[[], dict[str, float]]) -> tuple[dict[str, float], bool]:
        """``(references, reused)``; ``compute()`` measures them on ``trainer``'s untrained model."""
        if self.folder is None:
            return compute(), False

        def fresh() -> tuple[dict[str, float], bool]:
            before = state_digest(rng_state())
            value = compute()
            # A reusing run skips compute(): any draw from a global RNG here would leave it elsewhere.
            if state_digest(rng_state()) != before:
                warnings.warn("reuse: computing the references moved a global RNG, so a run that reuses them "
                              "would not train as a fresh one does; they are not stored", stacklevel=3)
                return value, False
            return value, True

        key = entry_key(trainer, REFERENCES_IGNORES, {"model": trainer.model.state_dict()})
        value, reused = self._through(self.folder / f"references-{key}.pt", key, fresh)
        return {name: float(v) for name, v in value.items()}, reused

    def warmup(self, trainer, run: Callable[[], None]) -> bool:
        """Runs the warm-up (``run()``) or restores a stored one into ``trainer``; True when restored."""
        if self.folder is None:
            run()
            return False
        before = trainer.state_dict()
        # Module states by entry: the entry then holds only the tensors the warm-up changed (the head, not
        # the frozen backbone: megabytes, not a ResNet50's 100 MB).
        tensors = {name: {k: state_digest(v) for k, v in before[name].items()} for name in MODULE_FIELDS}
        start = {name: tensors.get(name, before[name]) for name in WARMUP_FIELDS}
        key = entry_key(trainer, WARMUP_IGNORES, start, {"workers": trainer.workers})

        def fresh() -> tuple[dict[str, Any], bool]:
            run()
            after = trainer.state_dict()
            saved = {name: after[name] for name in WARMUP_FIELDS}
            for name in MODULE_FIELDS:
                saved[name] = {k: v for k, v in after[name].items() if state_digest(v) != tensors[name].get(k)}
            return saved, True

        saved, reused = self._through(self.folder / f"warmup-{key}.pt", key, fresh)
        if reused:
            start_persistent_workers(trainer.loader)
            state = trainer.state_dict()
            state.update({name: {**state[name], **saved[name]} if name in MODULE_FIELDS else saved[name]
                          for name in WARMUP_FIELDS})
            trainer.load_state_dict(state)
        return reused

    def _through(self, path: Path, key: str, fresh: Callable[[], tuple[Any, bool]]) -> tuple[Any, bool]:
        """``(value, reused)``: the entry at ``path`` if readable, else ``fresh()``'s value (stored when it
        says so). A folder that cannot be used (not writable, a file) costs the reuse, never the run."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = _acquire(path)
        except OSError as exc:
            warnings.warn(f"reuse: cannot use {path.parent} ({exc}); computing without it", stacklevel=4)
            return fresh()[0], False
        try:
            if path.exists():
                value = _read(path, key)
                if value is not None:
                    return value, True
            value, storable = fresh()
            if storable:
                _write(path, {"format": REUSE_FORMAT, "key": key, "value": value})
            return value, False
        finally:
            lock.release()


def _acquire(path: Path) -> FileLock:
    """The entry's lock, held; a run that finds it taken says so and waits for it."""
    lock = FileLock(f"{path}.lock")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("reuse: waiting for %s: another run on this node is computing it", path)
        lock.acquire()
    return lock


def _read(path: Path, key: str) -> Optional[Any]:
    try:
        entry = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(entry, dict) or entry.get("format") != REUSE_FORMAT or entry.get("key") != key:
            raise ValueError(f"not an entry of format {REUSE_FORMAT} for key {key}")
        return entry["value"]
    except Exception as exc:  # any unreadable file: truncated, not a checkpoint, another format
        warnings.warn(f"reuse: cannot read {path} ({type(exc).__name__}: {exc}); computing it again and "
                      "replacing it", stacklevel=4)
        return None


def _write(path: Path, entry: dict[str, Any]) -> None:
    """Temp file in the same folder, then ``os.replace``: a reader sees no entry or a whole one. A failed write
    (a full disk) only warns: the run has its result."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(entry, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        warnings.warn(f"reuse: cannot store {path} ({exc}); later runs will compute it again", stacklevel=4)
    finally:
        tmp.unlink(missing_ok=True)


def entry_key(trainer, ignores: tuple[str, ...], start: Any, extra: Optional[dict] = None) -> str:
    """The SHA-256 of everything the result depends on (module docstring), 32 hex digits."""
    config = {k: v for k, v in trainer.cfg.to_dict().items() if not ignored(k, ignores)}
    splits = trainer.splits
    selection = splits.val if splits.val is not None else splits.test
    data = [(part.indices, part.labels) for part in (splits.train, selection.query, selection.gallery)
            if part is not None]
    h = hashlib.sha256()
    h.update(json.dumps({"code": code_fingerprint(), "config": config, "runtime": repr(trainer.runtime),
                         "extra": extra or {}}, sort_keys=True, default=str).encode())
    h.update(state_digest([data, start]).encode())
    return h.hexdigest()[:32]


@functools.cache
def code_fingerprint() -> str:
    """REUSE_FORMAT, xbm's sources and the library versions: a changed trainer never reads stale results."""
    import xbm

    h = hashlib.sha256(f"format {REUSE_FORMAT}".encode())
    root = Path(xbm.__file__).parent
    for source in sorted(root.rglob("*.py")):
        h.update(str(source.relative_to(root)).encode() + b"\0" + source.read_bytes() + b"\0")
    for name in LIBRARIES:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "absent"
        h.update(f"{name}=={version}\0".encode())
    return h.hexdigest()


def state_digest(value: Any) -> str:
    """SHA-256 of nested dicts, lists, tuples, tensors, arrays and plain values (tensors: dtype, shape, bytes)."""
    h = hashlib.sha256()
    _feed(h, value)
    return h.hexdigest()


def _feed(h, value: Any) -> None:
    if isinstance(value, dict):
        h.update(b"{")
        for k in sorted(value, key=repr):
            _feed(h, k)
            _feed(h, value[k])
        h.update(b"}")
    elif isinstance(value, (list, tuple)):
        h.update(b"[" if isinstance(value, list) else b"(")
        for item in value:
            _feed(h, item)
        h.update(b"]")
    elif isinstance(value, (torch.Tensor, np.ndarray)):
        t = torch.as_tensor(value).detach()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    else:
        h.update(f"{type(value).__name__}:{value!r};".encode())
