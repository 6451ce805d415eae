"""Times every ``xbm.trainer.Trainer.train_epoch`` call of this process (benchmarks/bench_sweep_cost.py).

Python imports ``sitecustomize`` at start-up from the first folder of ``sys.path`` that holds one: the
benchmark puts this folder on the ``PYTHONPATH`` of a sweep, so the driver, Ray's workers and every
trial process load it. It imports nothing heavy (no torch, no Ray, no xbm): it only waits for
``xbm.trainer`` to be imported and then wraps ``Trainer.train_epoch``, which exists at every revision
the benchmark compares, so both sides are measured by this same instrument (the trainer's own
``train_s`` column is absent at old revisions).

Each call appends one JSON line ``{"trial_id", "epoch", "seconds", "pid"}`` to
``$XBM_TRAIN_TIMES_DIR/<pid>.jsonl``. The trial id comes from Ray Tune's context (``None`` outside a
trial); with ``reuse_actors`` one process runs several trials, hence the id on every line.
Nothing happens when ``XBM_TRAIN_TIMES_DIR`` is unset.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time
import warnings

TARGET = "xbm.trainer"
ENV = "XBM_TRAIN_TIMES_DIR"


def _trial_id():
    try:
        from ray import tune as ray_tune

        with warnings.catch_warnings():  # outside a trial Ray warns and returns None
            warnings.simplefilter("ignore")
            return ray_tune.get_context().get_trial_id()
    except Exception:  # not inside a Tune trial: the line keeps None
        return None


def _record(folder: str, epoch, seconds: float) -> None:
    line = json.dumps({"trial_id": _trial_id(), "epoch": int(epoch), "seconds": seconds, "pid": os.getpid()})
    with open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a") as out:
        out.write(line + "\n")


def wrap(trainer_class, folder: str) -> None:
    """Replace ``trainer_class.train_epoch`` by a timed call of the original (wall clock; the trainer's
    own training pass synchronises the device at its end, so the clock covers the GPU's work too)."""
    original = trainer_class.train_epoch
    if getattr(original, "_timed", False):
        return

    @functools.wraps(original)
    def train_epoch(self, epoch, *args, **kwargs):
        start = time.perf_counter()
        try:
            return original(self, epoch, *args, **kwargs)
        finally:
            _record(folder, epoch, time.perf_counter() - start)

    train_epoch._timed = True
    trainer_class.train_epoch = train_epoch


class _WrapOnImport:
    """A meta-path finder that lets the normal finders locate ``xbm.trainer`` and wraps the module's
    ``Trainer`` right after it executes."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                break
        else:
            return None
        execute, folder = spec.loader.exec_module, self.folder

        def exec_module(module):
            execute(module)
            wrap(module.Trainer, folder)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get(ENV):
    os.makedirs(os.environ[ENV], exist_ok=True)
    sys.meta_path.insert(0, _WrapOnImport(os.environ[ENV]))
