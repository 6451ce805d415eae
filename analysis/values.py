"""One number per trial: the value every table, comparison and importance ranks trials by.

Sweep rows: ``best_<metric>`` (what the sweep ranked trials by; ``final_<metric>`` with
``how="final"``), read from trials.parquet and, where the table lacks it (a metric other than the
sweep's, a trial known only from its epochs), computed from the epoch rows.
Confirm rows: the held-out test metric ``test_<metric>`` at the trial's last epoch (confirm trials
run the full budget without early stopping; choosing the best epoch on the test split would select
on the test set). ``final_test_<metric>`` in trials.parquet is used when the sink writes it; without
any test metric (``val_fraction = 0``: the selection split already is the test split) the final
``<metric>`` is used and the returned label says so.
"""
from __future__ import annotations

import pandas as pd

from analysis.columns import KEY
from analysis.errors import NotApplicable
from analysis.loader import Sweep


def metric_values(sweep: Sweep, metric: str | None = None, stage: str | None = "sweep",
                  how: str = "best") -> pd.Series:
    """``how``: ``best`` (best epoch by the metric's direction) or ``final`` (last epoch); one float
    per row of ``sweep.stage_trials(stage)``, NaN where the trial has no value yet."""
    if how not in ("best", "final"):
        raise ValueError(f"how must be one of ['best', 'final'], but got {how!r}")
    metric = metric or sweep.metric
    trials = sweep.stage_trials(stage)
    column = f"{how}_{metric}"
    values = pd.to_numeric(trials[column], errors="coerce").astype(float) if column in trials.columns \
        else pd.Series(float("nan"), index=trials.index)
    if values.isna().any():
        values = values.fillna(_from_epochs(sweep, metric, how, trials))
    return values.rename(column)


def _from_epochs(sweep: Sweep, metric: str, how: str, trials: pd.DataFrame) -> pd.Series:
    epochs = sweep.epochs
    if metric not in epochs.columns or not len(epochs):
        return pd.Series(float("nan"), index=trials.index)
    rows = epochs.dropna(subset=[metric]).sort_values([*KEY, "epoch"])
    grouped = rows.groupby(KEY)[metric]
    if how == "final":
        per_trial = grouped.last()
    else:
        per_trial = grouped.max() if sweep.higher_is_better(metric) else grouped.min()
    index = pd.MultiIndex.from_frame(trials[KEY].astype(str))
    return pd.Series(per_trial.reindex(index).to_numpy(dtype=float), index=trials.index)


def confirm_values(sweep: Sweep, metric: str | None = None) -> tuple[pd.Series, str]:
    """(one value per confirm-stage trial row, the name of what it is)."""
    metric = metric or sweep.metric
    if not sweep.has_confirm:
        raise NotApplicable("no confirm stage in this sweep (run `xbm-tune confirm PATH`)")
    test = metric if metric.startswith("test_") else f"test_{metric}"
    has_test = test in sweep.epochs.columns or f"final_{test}" in sweep.trials.columns
    chosen = test if has_test else metric
    values = metric_values(sweep, chosen, stage="confirm", how="final")
    label = f"final {chosen}" + ("" if has_test else " (no test metric written: the selection split)")
    return values, label


def finished(trials: pd.DataFrame) -> pd.Series:
    """Runs whose value is a full-budget result: ``status == "completed"``, or a run that is not
    ``failed`` / ``stopped_early`` yet has completed its ``config.epochs`` (a crashed driver leaves
    such runs ``running``; a trial known only from its epochs is ``unknown``). The second case is
    what makes a confirm stage whose driver died after the last epoch still count."""
    status = trials["status"].astype("string")
    done = (status == "completed").fillna(False)
    if "config.epochs" in trials.columns and "epochs_completed" in trials.columns:
        budget = pd.to_numeric(trials["config.epochs"], errors="coerce")
        reached = (pd.to_numeric(trials["epochs_completed"], errors="coerce") >= budget).fillna(False)
        done |= reached & ~status.isin(["failed", "stopped_early"]).fillna(False)
    return done.astype(bool)
