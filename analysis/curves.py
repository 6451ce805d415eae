"""Per-epoch views: learning curves, ASHA survival, drift and staleness over epochs per variant."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.columns import KEY
from analysis.errors import NotApplicable
from analysis.loader import Sweep

DRIFT_COLUMNS = ("drift_mean", "staleness_mean")


def learning_curves(sweep: Sweep, metric: str | None = None, stage: str = "sweep") -> pd.DataFrame:
    """Long frame ``sweep_dir, trial_id, variant, status, epoch, value``: one row per trial and
    epoch where the metric was reported."""
    metric = metric or sweep.metric
    epochs = sweep.stage_epochs(stage)
    if metric not in epochs.columns:
        raise NotApplicable(f"no epoch row reports {metric!r}")
    rows = epochs.dropna(subset=[metric])
    if not len(rows):
        raise NotApplicable(f"no {stage!r} epoch row has a value of {metric!r}")
    status = sweep.trials.set_index(KEY)["status"]
    frame = rows[KEY + ["variant", "epoch"]].copy()
    frame["value"] = rows[metric].astype(float)
    keys = pd.MultiIndex.from_frame(frame[KEY])
    frame.insert(3, "status", status.reindex(keys).to_numpy())
    return frame.sort_values(KEY + ["epoch"], ignore_index=True)


@dataclass(frozen=True)
class Survival:
    """``milestones``: per epoch, trials that reached it (and share of those started), trials that
    stopped right there and why; ``rungs``: ASHA's rungs when sweep.json names grace period and
    reduction factor; ``trials``: each trial's last epoch, status and stop reason."""

    milestones: pd.DataFrame
    rungs: tuple[int, ...]
    trials: pd.DataFrame


def asha_survival(sweep: Sweep, stage: str = "sweep") -> Survival:
    """How many trials reached each epoch and why each stopped (``status`` / ``stop_reason``).

    A trial reached epoch ``e`` when it completed at least ``e`` epochs; it stopped at its last
    epoch unless it is still ``running``. ASHA rungs: ``grace_period · reduction_factor**k`` up to
    the maximum epochs (Li et al., 2020, "A System for Massively Parallel Hyperparameter Tuning")."""
    trials = sweep.stage_trials(stage)
    if not len(trials):
        raise NotApplicable(f"no {stage!r} trials in this sweep")
    per_trial = trials[["trial_id", "variant", "status", "epochs_completed"]].copy()
    per_trial["stop_reason"] = trials["stop_reason"] if "stop_reason" in trials.columns else pd.NA
    per_trial["epochs_completed"] = per_trial["epochs_completed"].fillna(0).astype("Int64")
    last = int(per_trial["epochs_completed"].max() or 0)
    if last == 0:
        raise NotApplicable("no trial has completed an epoch yet")
    ended = per_trial[per_trial["status"] != "running"]
    records = []
    for epoch in range(1, last + 1):
        here = ended[ended["epochs_completed"] == epoch]
        reached = int((per_trial["epochs_completed"] >= epoch).sum())
        records.append({"epoch": epoch, "reached": reached, "share": reached / len(per_trial),
                        "stopped_here": len(here),
                        "stopped_early": int((here["status"] == "stopped_early").sum()),
                        "failed": int((here["status"] == "failed").sum()),
                        "completed": int((here["status"] == "completed").sum())})
    milestones = pd.DataFrame(records)
    rungs = _rungs(sweep, last)
    milestones["rung"] = milestones["epoch"].isin(rungs)
    return Survival(milestones, rungs, per_trial.reset_index(drop=True))


def _rungs(sweep: Sweep, last: int) -> tuple[int, ...]:
    """ASHA's rungs from sweep.json: its ``rungs`` (``--rungs``), else, in an older record, the geometric rungs of
    its options (none for another scheduler or without the options)."""
    if sweep.record.rungs is not None:
        return tuple(r for r in sweep.record.rungs if r <= last)
    grace, factor = sweep.option("grace_period"), sweep.option("reduction_factor")
    scheduler = sweep.option("scheduler", "asha")
    top = int(sweep.option("max_epochs") or last)
    if scheduler != "asha" or not grace or not factor or float(factor) <= 1:
        return ()
    rungs, rung = [], float(grace)
    while rung <= top:
        rungs.append(int(round(rung)))
        rung *= float(factor)
    return tuple(rungs)


def drift_staleness(sweep: Sweep, stage: str = "sweep", quantities: tuple[str, ...] = DRIFT_COLUMNS) -> pd.DataFrame:
    """Long frame ``variant, epoch, quantity, mean, std, n``: each diagnostic averaged over a
    variant's trials at each epoch (``drift_mean`` is NaN at epoch 1 by definition and skipped)."""
    epochs = sweep.stage_epochs(stage)
    present = [q for q in quantities if q in epochs.columns and epochs[q].notna().any()]
    if not present:
        raise NotApplicable(f"no epoch row reports any of {list(quantities)}")
    long = epochs.melt(id_vars=["variant", "epoch"], value_vars=present, var_name="quantity").dropna(subset=["value"])
    table = (long.groupby(["variant", "quantity", "epoch"])["value"].agg(["mean", "std", "size"])
             .rename(columns={"size": "n"}).reset_index())
    return table[["variant", "epoch", "quantity", "mean", "std", "n"]]
