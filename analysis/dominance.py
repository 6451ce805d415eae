"""The Pareto front of a several-objective sweep (``--metric recall_at_1:max --metric gpu_hours:min``):
``analysis.pareto(sweep)``, ``pareto_front``, ``non_dominated``.

A trial's point is its value of each objective in trials.parquet (``contract.objective_column``:
``final_<metric>``, the value its last epoch reported and the searcher was told, or the trial's own
``gpu_hours`` / ``wall_time_s``). Trial ``a`` dominates ``b`` when ``a`` is no worse on every objective
(under each one's mode) and better on at least one (Deb et al. 2002, NSGA-II, Sec. III-A). The front is
the sweep-stage trials that ended ranked (``completed``, ``stopped_early``), have a finite value for every
objective, and that no other such trial dominates; equal points are all on it.

Compute first, draw second: ``pareto_front`` (pure, pandas) and ``pareto`` (a loaded sweep) return
DataFrames; ``analysis.plots.plot_pareto`` draws one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from analysis.contract import FINISHED_STATUSES, objective_column
from analysis.errors import NotApplicable



@dataclass(frozen=True)
class ParetoFront:
    """``points``: every eligible trial with its objective columns and ``on_front``; ``front``: those on it,
    sorted by the first objective, best first; ``columns``/``modes``: the objectives' columns and modes."""

    points: pd.DataFrame
    columns: tuple[str, ...]
    modes: tuple[str, ...]

    @property
    def front(self) -> pd.DataFrame:
        front = self.points[self.points["on_front"]]
        return front.sort_values(self.columns[0], ascending=self.modes[0] == "min", kind="stable")


def non_dominated(values: np.ndarray, modes: Sequence[str]) -> np.ndarray:
    """Boolean mask of the rows of ``values`` [n, k] that no other row dominates, objective j under ``modes[j]``."""
    signed = np.asarray(values, dtype=float) * np.array([1.0 if m == "min" else -1.0 for m in modes])  # all minimised
    # no_worse[i, j]: row j is <= row i everywhere; better[i, j]: row j < row i somewhere
    no_worse = (signed[None, :, :] <= signed[:, None, :]).all(axis=2)
    better = (signed[None, :, :] < signed[:, None, :]).any(axis=2)
    return ~(no_worse & better).any(axis=1)


def pareto_front(trials: pd.DataFrame, metrics: Sequence[str], modes: Sequence[str]) -> ParetoFront:
    """The front of ``trials`` (trials.parquet rows) under ``metrics`` / ``modes`` (module docstring)."""
    if len(metrics) != len(modes) or not metrics:
        raise ValueError(f"pareto needs one mode per metric, but got metrics {list(metrics)} and modes {list(modes)}")
    columns = tuple(objective_column(m) for m in metrics)
    missing = [c for c in columns if c not in trials.columns]
    if missing:
        raise NotApplicable(f"trials.parquet has no column {missing[0]} (objective {metrics[columns.index(missing[0])]})")
    rows = trials
    if "stage" in rows.columns:
        rows = rows[rows["stage"].fillna("sweep") == "sweep"]
    if "status" in rows.columns:
        rows = rows[rows["status"].isin(FINISHED_STATUSES)]  # a failed or running trial has no final point
    values = rows[list(columns)].apply(pd.to_numeric, errors="coerce")
    rows = rows[np.isfinite(values.to_numpy(dtype=float)).all(axis=1)].copy()
    if rows.empty:
        raise NotApplicable(f"no completed or early-stopped trial has a finite value of every objective {list(columns)}")
    rows["on_front"] = non_dominated(rows[list(columns)].to_numpy(dtype=float), modes)
    return ParetoFront(rows, columns, tuple(modes))


def pareto(sweep) -> pd.DataFrame:
    """The non-dominated trials of ``sweep`` (``analysis.load``) under its objectives (``sweep.json``'s
    ``metrics``/``modes``), best first by the first objective."""
    record = sweep.record
    return pareto_front(sweep.trials, record.metrics, record.modes).front
