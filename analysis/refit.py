"""The refit stage (``xbm-tune refit``): the chosen configuration retrained on more classes (``config.train_on``:
``train+val``, or ``all``) over seeds; its held-out test value per seed, their mean and t-interval.

The value of a refit run is its ``<metric>`` at its last epoch: with the validation classes trained on, the run's
evaluation split is the test split (``eval_split = test``), and choosing its best epoch there would select on
the test set (as for the confirm stage, ``analysis.values.confirm_values``). A run trained on ``all`` classes has
no held-out class: its value is NaN (the data set's external protocol measures it, e.g. ``xbm-tune oneshot``).
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.columns import config_key, seeds
from analysis.compare import Interval, t_interval
from analysis.contract import REFIT_STAGE
from analysis.errors import NotApplicable
from analysis.loader import Sweep
from analysis.values import finished, metric_values

NO_HELD_OUT = "all"  # the config.train_on value whose runs hold no class out


@dataclass(frozen=True)
class RefitGroup:
    """One refit configuration: its runs (``frame``: trial_id, seed, classes, train_classes, completed, test)
    and the ``Interval`` (``analysis.compare.t_interval``) of its completed runs' test values."""

    config: str
    frame: pd.DataFrame
    interval: Interval


def refit_runs(sweep: Sweep, metric: str | None = None) -> pd.DataFrame:
    """One row per refit run: trial_id, seed, classes (``config.train_on``), train_classes, completed, test
    (the final ``<metric>`` on the held-out test classes; NaN for ``all``), config (its key but the seed)."""
    metric = metric or sweep.metric
    refit = sweep.stage_trials(REFIT_STAGE) if "stage" in sweep.trials.columns else sweep.trials.iloc[:0]
    if refit.empty:
        raise NotApplicable("no refit stage (run `xbm-tune refit PATH --best --seeds N`)")
    classes = refit.get("config.train_on", pd.Series("train", index=refit.index)).astype("string")
    values = metric_values(sweep, metric, stage=REFIT_STAGE, how="final")
    train_classes = refit.get("train_classes", pd.Series(pd.NA, index=refit.index))
    return pd.DataFrame({"trial_id": refit["trial_id"].astype("string"), "seed": seeds(refit), "classes": classes,
                         "train_classes": pd.to_numeric(train_classes, errors="coerce").astype("Int64"),
                         "completed": finished(refit), "test": values.where(classes != NO_HELD_OUT),
                         "config": config_key(refit)})


def refit_groups(sweep: Sweep, metric: str | None = None, confidence: float = 0.95) -> list[RefitGroup]:
    """The refit runs grouped by configuration (seed aside), each with its test interval over completed runs."""
    runs = refit_runs(sweep, metric)
    groups = []
    for key, group in runs.groupby("config", sort=False):
        done = group[group["completed"]]
        groups.append(RefitGroup(str(key), group.drop(columns=["config"]).reset_index(drop=True),
                                 t_interval(done["test"], confidence)))
    return groups
