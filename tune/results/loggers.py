"""``--log NAME`` (repeatable): where a sweep's trials are also logged, besides the Parquet files and
TensorBoard. A registry of Ray's logger callbacks, each an optional extra of the package:

==========  ====================================  =======================  ==========================
name        callback                              package (extra)          where
==========  ====================================  =======================  ==========================
``wandb``   ``tune.results.wandb_logger.SweepWandb``      wandb (``.[wandb]``)     W&B; offline: <sweep>/wandb
``mlflow``  ``tune.results.mlflow_logger.SweepMLflow``    mlflow-skinny (``.[mlflow]``)  MLFLOW_TRACKING_URI or <sweep>/mlruns
==========  ====================================  =======================  ==========================

``build_loggers`` runs in ``tune.driver.plan.prepare``: an unknown name or a missing package exits 2 before Ray
starts. The callbacks' ``describe()`` is printed when the sweep starts, their ``closing()`` (W&B's sync
command) when it ends.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from tune.errors import SweepInputError, require


@dataclass(frozen=True)
class Logger:
    module: str  # the package it needs
    extra: str  # pyproject's optional extra that installs it
    factory: str  # "module:function(storage_path, experiment) -> callback", imported only when asked for


LOGGERS = {
    "wandb": Logger("wandb", "wandb", "tune.results.wandb_logger:build_wandb"),
    "mlflow": Logger("mlflow", "mlflow", "tune.results.mlflow_logger:build_mlflow"),
}


def build_loggers(names: tuple[str, ...], storage_path: str, experiment: str) -> list:
    """The callbacks for ``--log`` ``names`` of the sweep ``experiment`` under ``storage_path``."""
    callbacks = []
    for name in names:
        if name not in LOGGERS:
            raise SweepInputError(f"--log must be one of {sorted(LOGGERS)}, but got {name!r}")
        spec = LOGGERS[name]
        require(spec.module, f"--log {name}", f"pip install '.[{spec.extra}]'")
        module, function = spec.factory.split(":")
        callbacks.append(getattr(importlib.import_module(module), function)(storage_path, experiment))
    return callbacks
