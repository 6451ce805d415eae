"""The old module paths, for the pickles a sweep started under them holds: the layout before 2026-11-26 (issue
31) and the top-level modules of ``tune`` and ``xbm`` before 2026-12-02 (issue 54: now in ``tune.driver``,
``tune.errors``, ``tune.results.trial_config``, ``tune.trial``, and ``xbm``'s ``runtime``, ``evaluate``, ``data``).

These aliases may go after 2027-06-01 (``REMOVE_AFTER``): a sweep started before its layout changed and still
resumed six months on is not a case worth a module. Nothing in the code imports an old path; only unpickling does.

Tune pickles the sweep's scheduler, searcher and callbacks (``tuner.pkl``, the searcher's state) under their
classes' module paths. ``install()`` lets ``import tune.schedulers`` and the like find where each name went, so
``xbm-tune resume`` continues such a sweep. It only answers names that no longer exist (its finder comes last
on ``sys.meta_path``), so a real module always wins.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types

REMOVE_AFTER = "2027-06-01"

# old module -> the modules its names went to, searched in this order (from git's renames in 83c9674)
MOVED: dict[str, tuple[str, ...]] = {
    "tune.checkpoints": ("tune.trial.checkpoints",),
    "tune.cluster": ("tune.driver.cluster",),
    "tune.confirm": ("tune.commands.confirm",),
    "tune.data_parallel": ("tune.trial.data_parallel",),
    "tune.export": ("tune.commands.export",),
    "tune.extras": ("tune.errors",),
    "tune.guards": ("tune.search.guards",),
    "tune.live": ("tune.results.live",),
    "tune.loggers": ("tune.results.loggers",),
    "tune.logs": ("tune.trial.logs",),
    "tune.mlflow_logger": ("tune.results.mlflow_logger",),
    "tune.options": ("tune.driver.options", "tune.errors", "tune.results.trial_config", "tune.search.spaces.fairness"),
    "tune.optuna_study": ("tune.search.optuna_study",),
    "tune.parquet": ("tune.results.parquet",),
    "tune.pb2": ("tune.search.pb2",),
    "tune.plan": ("tune.driver.plan",),
    "tune.ray_progress": ("tune.trial.ray_progress",),
    "tune.record": ("tune.results.record",),
    "tune.resources": ("tune.trial.resources",),
    "tune.retrieve": ("tune.commands.retrieve",),
    "tune.schedulers": ("tune.search.schedulers", "tune.search.pbt"),
    "tune.searchers": ("tune.search.searchers",),
    "tune.sink": ("tune.results.sink",),
    "tune.spaces": ("tune.search.spaces",),
    "tune.spaces.distributions": ("tune.search.spaces.distributions",),
    "tune.spaces.errors": ("tune.search.spaces.errors",),
    "tune.spaces.fairness": ("tune.search.spaces.fairness",),
    "tune.spaces.loader": ("tune.search.spaces.loader",),
    "tune.spaces.param": ("tune.search.spaces.param",),
    "tune.spaces.schema": ("tune.search.spaces.schema",),
    "tune.spaces.space": ("tune.search.spaces.space",),
    "tune.spaces.validation": ("tune.search.spaces.validation",),
    "tune.status": ("tune.results.status",),
    "tune.submit": ("tune.commands.submit",),
    "tune.sweep": ("tune.driver.sweep",),
    "tune.tensorboard_logger": ("tune.results.tensorboard_logger",),
    "tune.train_workers": ("tune.commands.train", "tune.trial.data_parallel"),
    "tune.trainable": ("tune.trial.trainable", "tune.trial.base", "tune.trial.data_parallel", "tune.driver.options",
                      "tune.errors", "tune.results.trial_config"),
    "tune.trial.guards": ("tune.search.guards",),
    "tune.trial_loop": ("tune.trial.loop",),
    "tune.wandb_logger": ("tune.results.wandb_logger",),
    "tune.warm_start": ("tune.search.warm_start",),
    "tune.workers": ("tune.driver.workers", "tune.results.trial_config"),
    "xbm.checkpoint": ("xbm.training.checkpoint",),
    "xbm.cpus": ("xbm.runtime.cpus",),
    "xbm.diagnostics": ("xbm.evaluate.diagnostics",),
    "xbm.distributed": ("xbm.training.distributed",),
    "xbm.embed_cli": ("tune.commands.embed",),
    "xbm.embedder": ("xbm.evaluate.embedder",),
    "xbm.image_folder": ("xbm.data.image_folder",),
    "xbm.inputs": ("xbm.data.inputs",),
    "xbm.loss": ("xbm.losses.xbm_loss",),
    "xbm.pair_masks": ("xbm.losses.pair_masks",),
    "xbm.precision": ("xbm.runtime.precision",),
    "xbm.progress": ("xbm.runtime.progress",),
    "xbm.retrieval": ("xbm.evaluate.retrieval",),
    "xbm.signals": ("xbm.evaluate.signals",),
    "xbm.training.criteria": ("xbm.losses.criteria",),
    "xbm.training.evaluation": ("xbm.evaluate.epoch",),
    "xbm.training.runtime": ("xbm.runtime.device",),
    "xbm.training.loss_kinds": ("xbm.losses.kinds",),
}


class _Moved(types.ModuleType):
    """An old module path: each attribute is read from the first of its new modules that has it."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        for new in MOVED[self.__name__]:
            module = importlib.import_module(new)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"{name!r} was in {self.__name__}, which moved to {' / '.join(MOVED[self.__name__])} "
                             f"and none of them has it now")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname not in MOVED:
            return None
        is_package = any(other.startswith(fullname + ".") for other in MOVED)
        return importlib.util.spec_from_loader(fullname, self, is_package=is_package)

    def create_module(self, spec):
        module = _Moved(spec.name)
        if spec.submodule_search_locations is not None:
            module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        pass


def install() -> None:
    """Let the old module paths import (once per process; a no-op after)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.append(_Finder())
