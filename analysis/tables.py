"""Leaderboard, best trial per normaliser kind, status counts, Recall@K at the data set's K set: small
DataFrames from a ``Sweep``."""
from __future__ import annotations

import re

import pandas as pd

from analysis.columns import KEY, KIND, varying_columns
from analysis.errors import NotApplicable
from analysis.loader import Sweep
from analysis.values import metric_values

TRIAL_COLUMNS = ["trial_id", "variant", "status", "stop_reason", "epochs_completed", "best_epoch"]


def leaderboard(sweep: Sweep, metric: str | None = None, stage: str = "sweep", top: int | None = None,
                statuses: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Trials ranked by ``best_<metric>`` (direction: the sweep's mode for its metric), trials
    without a value last; the swept ``config.*`` columns beside them. ``statuses`` filters rows."""
    table = _ranked(sweep, metric, stage, statuses).reset_index(drop=True)
    table.insert(0, "rank", pd.array(range(1, len(table) + 1), dtype="Int64"))
    return table.head(top) if top else table


def best_per_kind(sweep: Sweep, metric: str | None = None, stage: str = "sweep") -> pd.DataFrame:
    """The best trial of each ``config.normaliser.kind`` (leaderboard order), with the kind's trial count."""
    trials = sweep.stage_trials(stage)
    if KIND not in trials.columns:
        raise NotApplicable(f"best per kind needs the column {KIND!r}, which this sweep lacks")
    board = _ranked(sweep, metric, stage, None)
    board.insert(0, "kind", trials.loc[board.index, KIND].astype("string"))
    counts = board.groupby("kind").size()
    best = board.drop_duplicates("kind", keep="first").reset_index(drop=True)
    best.insert(1, "n_trials", best["kind"].map(counts).astype("Int64"))
    return best


def _ranked(sweep: Sweep, metric: str | None, stage: str, statuses) -> pd.DataFrame:
    metric = metric or sweep.metric
    trials = sweep.stage_trials(stage)
    if not len(trials):
        raise NotApplicable(f"no {stage!r} trials in this sweep")
    value = metric_values(sweep, metric, stage)
    several = trials["sweep_dir"].nunique() > 1
    columns = (["sweep_dir"] if several else []) + [c for c in TRIAL_COLUMNS if c in trials.columns]
    table = trials[columns + varying_columns(trials)].copy()
    at = columns.index("status") + 1 if "status" in columns else len(columns)
    table.insert(at, value.name, value)
    if statuses is not None:
        table = table[table["status"].isin(statuses)]
    return table.sort_values(value.name, ascending=not sweep.higher_is_better(metric), na_position="last",
                             kind="stable")


def status_counts(sweep: Sweep) -> pd.DataFrame:
    """Trials per stage and status (``unknown``: known only from epoch rows)."""
    trials = sweep.trials
    if not len(trials):
        return pd.DataFrame(columns=["stage", "status", "n_trials"])
    return (trials.groupby(["stage", "status"], dropna=False).size().rename("n_trials").reset_index()
            .sort_values(["stage", "status"], ignore_index=True))


def stop_reasons(sweep: Sweep, stage: str = "sweep") -> pd.DataFrame:
    """Why trials ended: one row per (status, stop_reason) with counts and mean epochs reached.
    Metric values inside a reason are masked (``recall_at_1=0.6719`` -> ``recall_at_1=…``) so that
    trials culled at the same rung share a row."""
    trials = sweep.stage_trials(stage)
    if not len(trials):
        raise NotApplicable(f"no {stage!r} trials in this sweep")
    reasons = trials.get("stop_reason", pd.Series(pd.NA, index=trials.index)).astype("string").fillna("-")
    frame = trials.assign(stop_reason=reasons.str.replace(r"=\s*-?[0-9][0-9.eE+-]*", "=…", regex=True))
    return (frame.groupby(["status", "stop_reason"], dropna=False)
            .agg(n_trials=("trial_id", "size"), mean_epochs=("epochs_completed", "mean"))
            .reset_index().sort_values("n_trials", ascending=False, ignore_index=True))


def recall_at_k(sweep: Sweep, metric: str | None = None, stage: str = "sweep", top: int | None = None) -> pd.DataFrame:
    """The leaderboard's trials with every ``recall_at_K`` their runs reported (the data set's papers' K set,
    or ``eval_ks``), read at each trial's best epoch by ``metric`` (its first, on ties)."""
    metric = metric or sweep.metric
    epochs = sweep.epochs
    names = sorted((c for c in epochs.columns if re.fullmatch(r"recall_at_\d+", c)), key=lambda c: int(c[10:]))
    if not names or metric not in epochs.columns:
        raise NotApplicable(f"Recall@K needs recall_at_K and {metric!r} epoch columns, which this sweep lacks")
    board = _ranked(sweep, metric, stage, None)   # keeps the trials' index
    board = board.head(top) if top else board
    rows = epochs.dropna(subset=[metric]).sort_values([*KEY, "epoch"]).reset_index(drop=True)
    sign = 1 if sweep.higher_is_better(metric) else -1
    ranked = rows.assign(_v=pd.to_numeric(rows[metric], errors="coerce") * sign)
    best = ranked.loc[ranked.groupby(KEY)["_v"].idxmax()].set_index(KEY)[names]
    trials = sweep.stage_trials(stage).loc[board.index, KEY].astype(str)
    values = best.reindex(pd.MultiIndex.from_frame(trials)).to_numpy(dtype=float)
    table = board[["trial_id"]].reset_index(drop=True)
    table.insert(0, "rank", pd.array(range(1, len(table) + 1), dtype="Int64"))
    return pd.concat([table, pd.DataFrame(values, columns=names)], axis=1)
