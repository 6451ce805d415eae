"""Choosing a sweep's trials to re-run: ``select_top`` (the K best distinct configurations, for ``confirm``; the
first of them is ``refit --best``'s trial) over ``front_rows`` (a several-objective sweep's Pareto front).

Selection (pure): ``stage == "sweep"`` trials with a finite ``best_<metric>``; ``completed`` trials rank before
``stopped_early`` ones (ASHA judged those at a rung and culled them, whatever their best value), then by
``best_<metric>``; trials with the same configuration (all ``config.*`` but the seed, nulls included) count once,
at their best. A sweep with several objectives takes its candidates from its Pareto front
(``analysis.dominance``), ranked the same way by the first objective.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from analysis.contract import FINISHED_STATUSES, SWEEP_STAGE
from tune.results.parquet import config_of, finite

RUN_KEYS = ("seed", "evaluate_test")  # set by the re-running stage itself, never copied from the sweep


@dataclass(frozen=True)
class Candidate:
    """One configuration chosen to be re-run."""

    rank: int
    trial_id: str
    status: str
    value: float  # its best_<metric> in the sweep
    config: dict[str, Any]  # flat dotted TrainConfig values (absent params dropped), no seed
    duplicates: int = 1  # sweep trials that ran this same configuration


def select_top(rows: Sequence[Mapping[str, Any]], metric: str, mode: str, top: int) -> list[Candidate]:
    """The ``top`` best distinct configurations among the sweep's trials (module docstring)."""
    column = f"best_{metric}"
    ranked = []
    for row in rows:
        value = row.get(column)
        if (row.get("stage") or SWEEP_STAGE) != SWEEP_STAGE or row.get("status") not in FINISHED_STATUSES:
            continue
        if not finite(value):
            continue
        sign = -1.0 if mode == "max" else 1.0
        ranked.append(((FINISHED_STATUSES.index(row["status"]), sign * float(row[column])), row))
    ranked.sort(key=lambda item: item[0])
    chosen: dict[tuple, list] = {}
    for _, row in ranked:
        config = {k: v for k, v in config_of(row).items() if v is not None and k not in RUN_KEYS}
        key = tuple(sorted((k, repr(v)) for k, v in config.items()))
        if key in chosen:
            chosen[key][1] += 1
        elif len(chosen) < top:
            chosen[key] = [row, 1, config]
    return [Candidate(i + 1, str(row.get("trial_id")), row["status"], float(row[column]), config, n)
            for i, (row, n, config) in enumerate(chosen.values())]


def front_rows(rows: Sequence[Mapping[str, Any]], record) -> list[Mapping[str, Any]]:
    """A several-objective sweep's candidates: its Pareto front (``analysis.dominance``), which
    ``select_top`` then ranks by the first objective; a one-objective sweep's rows as they are."""
    if len(record.metrics) < 2:
        return list(rows)
    import pandas as pd

    from analysis.dominance import pareto_front
    from analysis.errors import NotApplicable

    try:
        front = set(pareto_front(pd.DataFrame(list(rows)), record.metrics, record.modes).front["trial_id"])
    except NotApplicable:
        return []
    return [row for row in rows if row.get("trial_id") in front]
