"""Where a sweep's trial time went: the ``train_s``, ``data_wait_s``, ``eval_s``, ``checkpoint_s``
and ``setup_s`` columns of trials.parquet, summed over trials, as fractions of their summed ``wall_time_s``.

    time: training 71% (data wait 3%), evaluation 18%, checkpoints 6%, set-up 5%

``data_wait_s`` is part of ``train_s`` (the training pass waiting for its next batch), so it is shown inside
the training share; what is left of the wall time (Tune's result round trips, the actor's start) is
``other``. Trials written before these columns existed have none: the line is then omitted.
"""
from __future__ import annotations

import pandas as pd

#: (label, trials.parquet column) in the order the line shows them
PARTS = (("training", "train_s"), ("evaluation", "eval_s"), ("checkpoints", "checkpoint_s"), ("set-up", "setup_s"))


def time_breakdown(trials: pd.DataFrame) -> dict[str, float] | None:
    """Fractions of the summed wall time per part (``PARTS`` labels, ``data wait`` and ``other``), over the
    trials that report both their wall time and their training time; None when none does."""
    needed = ["wall_time_s", "train_s"]
    if trials.empty or any(c not in trials.columns for c in needed):
        return None
    columns = [c for c in ("wall_time_s", "data_wait_s", *(c for _, c in PARTS)) if c in trials.columns]
    numbers = trials[columns].apply(lambda column: pd.to_numeric(column, errors="coerce").astype("float64"))
    rows = numbers[numbers[needed].notna().all(axis=1) & (numbers["wall_time_s"] > 0)]
    if rows.empty:
        return None
    wall = float(rows["wall_time_s"].sum())
    shares = {label: float(rows[column].fillna(0).sum()) / wall if column in rows else 0.0 for label, column in PARTS}
    shares["data wait"] = float(rows["data_wait_s"].fillna(0).sum()) / wall if "data_wait_s" in rows else 0.0
    shares["other"] = max(1.0 - sum(shares[label] for label, _ in PARTS), 0.0)
    return shares


def time_line(trials: pd.DataFrame) -> str | None:
    """``time: training 71% (data wait 3%), evaluation 18%, checkpoints 6%, set-up 5%`` (``other`` when
    at least 1%), or None without the columns."""
    shares = time_breakdown(trials)
    if shares is None:
        return None
    text = (f"time: training {shares['training']:.0%} (data wait {shares['data wait']:.0%}), "
            f"evaluation {shares['evaluation']:.0%}, checkpoints {shares['checkpoints']:.0%}, "
            f"set-up {shares['set-up']:.0%}")
    return text + (f", other {shares['other']:.0%}" if shares["other"] >= 0.005 else "")
