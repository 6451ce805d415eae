"""A trial's config as every layer reads it: the ``TrainConfig`` it means, its workers and its GPU-hours.

Ray hands a trial a flat, dotted config dict; the trainable, the sink, the rung placement and the guards all
read it through these functions, so one rule decides what a config means everywhere.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

if TYPE_CHECKING:
    from xbm.config import TrainConfig

#: the TrainConfig key holding a run's number of workers (``config.workers`` in Parquet)
WORKERS_KEY = "workers"


def train_config(config: Mapping[str, Any]) -> TrainConfig:
    """Ray's (flat, dotted) config dict -> ``TrainConfig``.

    Keys whose value is ``None`` are conditional parameters absent from this trial (their ``when`` did
    not hold): they are dropped, so the trainer uses the field's default, and the sink writes null.
    NumPy scalars (Ray's samplers, configs read back from Parquet) become Python values.
    """
    # imported here: xbm.config pulls in torch (through xbm.normalisers), which a trial process should
    # load inside the trial, where its cost belongs, not while Ray builds the actor
    from xbm.config import TrainConfig

    return TrainConfig.from_dict({k: v.item() if isinstance(v, np.generic) else v
                                  for k, v in config.items() if v is not None})


def config_workers(config: Mapping[str, Any]) -> int:
    """A trial config's workers (1 when absent or null)."""
    value = config.get(WORKERS_KEY)
    return int(value) if value is not None and value == value else 1


def trial_gpus(trial: Any, gpus_per_worker: float | None = None) -> float:
    """The GPUs a Tune trial uses: its config's workers x ``gpus_per_worker``. Without ``gpus_per_worker``
    (an object pickled before it existed), the GPUs of the trial's placement group, which are a
    one-worker trial's GPUs (a multi-worker trial's workers are outside it)."""
    if gpus_per_worker is None:
        return float(trial.placement_group_factory.required_resources.get("GPU", 0.0))
    return config_workers(trial.config) * float(gpus_per_worker)


def gpu_hours(seconds: float, gpus: float) -> float:
    """GPU-hours of a trial that ran ``seconds`` (Tune's ``time_total_s``) on ``gpus`` (``trial_gpus``): the one
    rule of the sink's ``gpu_hours``, the GPU-hour budget and the searchers' ``gpu_hours`` objective."""
    return seconds * gpus / 3600.0
