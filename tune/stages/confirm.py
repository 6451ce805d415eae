"""The confirm stage (``xbm-tune confirm``): a sweep's K best configurations (``tune.stages.selection.select_top``)
re-run over N seeds, to the sweep's full epoch budget, with ``evaluate_test=True``, as ``stage = "confirm"`` rows of
the same sweep folder. :func:`plan_confirm` reads and checks everything before Ray starts."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from analysis.contract import SweepRecord
from tune.errors import SweepInputError
from tune.stages.rerun import check_configs, rerun_overrides, rerun_seeds
from tune.stages.selection import Candidate, front_rows, select_top


def confirm_configs(candidates: Sequence[Candidate], seeds: Sequence[int],
                    overrides: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """One config per (candidate, seed), candidates outer: what ``run_configs`` runs."""
    return [{**c.config, **dict(overrides or {}), "seed": int(s), "evaluate_test": True}
            for c in candidates for s in seeds]


@dataclass
class ConfirmPlan:
    uri: str
    record: SweepRecord
    candidates: list[Candidate]
    seeds: list[int]
    configs: list[dict[str, Any]]
    overrides: dict[str, Any]  # --set, paths made absolute


def plan_confirm(args: argparse.Namespace) -> ConfirmPlan:
    """``xbm-tune confirm``'s arguments -> its plan; any bad input raises SweepInputError (exit 2)."""
    from tune.results.record import read_record
    from tune.search.warm_start import read_trials

    if args.top < 1 or args.seeds < 1:
        raise SweepInputError(f"--top and --seeds must be >= 1, but got --top {args.top} --seeds {args.seeds}")
    uri = str(args.path).rstrip("/")
    try:
        record = read_record(uri)
        metric, mode = record.metric, record.mode
        candidates = select_top(front_rows(read_trials(uri), record), metric, mode, args.top)
        if not candidates:
            raise SweepInputError(f"nothing to confirm in {uri}: no completed or early-stopped sweep trial has "
                                  f"a finite best_{metric}")
        seeds, overrides = rerun_seeds(record, args.seeds, args.seed_start), rerun_overrides(args.overrides)
        configs = confirm_configs(candidates, seeds, {**record.paths, **overrides})
        check_configs(configs)
    except SweepInputError:
        raise
    except ValueError as exc:
        raise SweepInputError(str(exc)) from exc
    return ConfirmPlan(uri, record, candidates, seeds, configs, overrides)
