"""``xbm-tune confirm PATH --top K --seeds N``: re-run a sweep's K best configurations over N seeds.

A sweep picks its winners on one seed, under early stopping, on the validation classes: their values
are optimistic (the winner's curse) and noisy (the AXBN paper's Table 1 reports mean +- std over 3
runs for that reason). The confirmation stage re-runs each chosen configuration N times

* with seeds ``s0 + 1 .. s0 + N`` where ``s0`` is the sweep's seed (``--seed-start`` to change):
  never the seed the config was selected on, and the same seeds for every config, so that variants
  can be compared pairwise over shared seeds (``analysis.compare.paired_differences``);
* to the full epoch budget of the sweep, under FIFO (no early stopping, no search);
* with ``evaluate_test=True``: the held-out test classes are evaluated (``test_<metric>`` columns)
  next to the validation split the sweep selected on;

into the same sweep folder and the same Parquet layout, with ``stage = "confirm"``
(``tune.sweep.run_configs``). ``--dry-run`` prints the selection and runs nothing.

Paths: each run reads the sweep's files where ``sweep.json`` says they are now (``paths``); a
``--set`` path (relative to the working directory) moves them, and is recorded there. The data set is
opened once on the driver before Ray starts: a wrong path exits 2.

Selection (``select_top``, pure): ``stage == "sweep"`` trials with a finite ``best_<metric>`` (the
sweep's metric and mode from ``results/sweep.json``); ``completed`` trials rank before
``stopped_early`` ones (ASHA judged those at a rung and culled them, whatever their best value), then
by ``best_<metric>``; trials with the same configuration (all ``config.*`` but the seed, nulls
included) count once, at their best. Fewer than K candidates: all of them, with a note. A sweep with
several objectives (``--metric`` repeated) takes its candidates from its Pareto front (``front_rows``,
``analysis.pareto``), ranked the same way by the first objective.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from analysis.contract import FINISHED_STATUSES, SweepRecord
from tune.commands import plain
from tune.results.parquet import RESULTS, config_of, finite
from tune.search.warm_start import read_trials

RUN_KEYS = ("seed", "evaluate_test")  # set by the confirm stage itself, never copied from the sweep


@dataclass(frozen=True)
class Candidate:
    """One configuration chosen for confirmation."""

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
        if (row.get("stage") or "sweep") != "sweep" or row.get("status") not in FINISHED_STATUSES:
            continue
        if not finite(value):
            continue
        sign = -1.0 if mode == "max" else 1.0
        ranked.append(((FINISHED_STATUSES.index(row["status"]), sign * value), row))
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


def confirm_configs(candidates: Sequence[Candidate], seeds: Sequence[int],
                    overrides: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """One config per (candidate, seed), candidates outer: what ``run_configs`` runs."""
    return [{**c.config, **dict(overrides or {}), "seed": int(s), "evaluate_test": True}
            for c in candidates for s in seeds]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = plain(__doc__.split("\n\n")[0])
    parser.epilog = ("examples:\n  xbm-tune confirm ~/xbm_sweeps/quickstart-20261121-081500 --top 3 --seeds 3\n"
                     "  xbm-tune confirm PATH --top 5 --seeds 5 --gpus-per-trial 0.5 --dry-run")
    parser.add_argument("path", metavar="PATH", help="the sweep folder (holding results/sweep.json)")
    what = parser.add_argument_group("what to confirm")
    what.add_argument("--top", type=int, default=3, help="configurations to re-run (default %(default)s)")
    what.add_argument("--seeds", type=int, default=3, help="runs per configuration (default %(default)s)")
    what.add_argument("--seed-start", type=int, default=None,
                      help="first seed (default: the sweep's seed + 1; seeds are consecutive)")
    what.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                      help="change a config value for every run (e.g. data_root=/data, device=cuda)")
    what.add_argument("--dry-run", action="store_true", help="print the selection and run nothing")
    add_rerun_arguments(parser)


def add_rerun_arguments(parser: argparse.ArgumentParser) -> None:
    """The resource flags of a stage that re-runs a sweep's configurations (confirm, refit)."""
    ray = parser.add_argument_group("resources")
    ray.add_argument("--max-concurrent", type=int, default=None, help="trials at once (default: as resources allow)")
    ray.add_argument("--cpus-per-trial", type=float, default=None, help="default: the sweep's")
    ray.add_argument("--gpus-per-trial", type=float, default=None, help="default: the sweep's (fractions allowed)")
    ray.add_argument("--address", default=None,
                     help="the address of a running Ray cluster to join, as ray.init takes it (auto, HOST:PORT, "
                          "ray://HOST:10001), not its dashboard URL; default: start a local Ray")
    ray.add_argument("--dashboard", action=argparse.BooleanOptionalAction, default=True,
                     help="start Ray's dashboard on 127.0.0.1 (default on)")


def rerun_options(record: SweepRecord, args: argparse.Namespace):
    """The sweep's recorded options for a stage that re-runs its configurations, with this command's resources
    and no warm start."""
    from tune.options import SweepOptions

    changes = {k: getattr(args, k) for k in ("cpus_per_trial", "gpus_per_trial", "address")
               if getattr(args, k) is not None}
    return SweepOptions.from_record(record.options).replace(
        metric=record.metric, mode=record.mode, max_concurrent=args.max_concurrent, dashboard=args.dashboard,
        warm_start=None, **changes)


@dataclass
class ConfirmPlan:
    uri: str
    record: SweepRecord
    candidates: list[Candidate]
    seeds: list[int]
    configs: list[dict[str, Any]]
    overrides: dict[str, Any]  # --set, paths made absolute


def rerun_seeds_and_overrides(args: argparse.Namespace, record: SweepRecord) -> tuple[list[int], dict[str, Any]]:
    """A re-running stage's seeds (``--seeds`` from ``--seed-start``, else after the sweep's seed) and its ``--set``
    values, paths made absolute here."""
    from pathlib import Path

    from tune.options import SweepInputError
    from xbm.checks import parse_overrides
    from xbm.inputs import absolute_paths

    start = args.seed_start if args.seed_start is not None else int(record.option("seed", 0)) + 1
    return list(range(start, start + args.seeds)), absolute_paths(parse_overrides(args.overrides, SweepInputError), Path.cwd())


def check_configs(configs: Sequence[Mapping[str, Any]]) -> None:
    """Every config a valid TrainConfig (a bad ``--set`` fails here) and its data readable on this machine."""
    from tune.options import train_config
    from tune.plan import check_data

    for config in configs:
        train_config(config)
    check_data(configs)


def plan(args: argparse.Namespace) -> ConfirmPlan:
    """Read and check everything before Ray starts; any bad input raises SweepInputError (exit 2)."""
    from tune.options import SweepInputError
    from tune.results.record import read_record

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
        seeds, overrides = rerun_seeds_and_overrides(args, record)
        configs = confirm_configs(candidates, seeds, {**record.paths, **overrides})
        check_configs(configs)
    except SweepInputError:
        raise
    except ValueError as exc:
        raise SweepInputError(str(exc)) from exc
    return ConfirmPlan(uri, record, candidates, seeds, configs, overrides)


def run(args: argparse.Namespace, **init_kwargs) -> int:
    """Select, print, run (unless --dry-run), summarise. ``init_kwargs`` go to ``ray.init``."""
    from tune.results.record import record_paths
    from tune.sweep import run_configs
    from xbm.inputs import RELOCATABLE_KEYS

    p = plan(args)
    metric, mode = p.record.metric, p.record.mode
    swept = p.record.swept
    print(describe_selection(p.candidates, metric, mode, p.seeds, args.top, swept))
    if any(float(c.config.get("val_fraction", 0.0)) == 0.0 for c in p.candidates):
        print("note: val_fraction is 0, so the sweep selected on the test classes and the confirmed test "
              "values are optimistic; sweep with --set val_fraction=0.2 to hold the test classes out")
    if args.dry_run:
        return 0
    # the sweep's data is there now: a later resume or confirm reads it there too
    moved = {k: v for k, v in p.overrides.items() if k in RELOCATABLE_KEYS and k not in swept}
    record_paths(p.uri, p.record, {**p.record.paths, **moved})
    outcome = run_configs(p.configs, rerun_options(p.record, args), f"{p.uri}/{RESULTS}", stage="confirm",
                          **init_kwargs)
    print(summary(p.uri, metric))
    if outcome.interrupted:  # Ctrl-C: Ray's Tuner.fit returned early (tune.sweep.fit); `resume` does not continue these
        sys.stdout.flush()
        print("interrupted: the confirm runs stopped before they finished; the summary above covers the finished "
              "ones", file=sys.stderr)
        return 1
    trials = outcome.trials
    confirm = trials[trials["stage"] == "confirm"] if "stage" in trials else trials.iloc[:0]
    return 0 if (confirm["status"] == "completed").any() else 1


def describe_selection(candidates: Sequence[Candidate], metric: str, mode: str, seeds: Sequence[int],
                       top: int, swept: Sequence[str] = ()) -> str:
    head = (f"confirming {len(candidates)} configuration(s) x {len(seeds)} seed(s) {list(seeds)} = "
            f"{len(candidates) * len(seeds)} run(s); chosen by best_{metric} ({mode})")
    if len(candidates) < top:
        head += f"; only {len(candidates)} distinct candidate(s) for --top {top}"
    lines = [head]
    for c in candidates:
        same = f", {c.duplicates} sweep trials ran it" if c.duplicates > 1 else ""
        params = ", ".join(f"{k}={_short(c.config[k])}" for k in swept if k in c.config)
        lines.append(f"  #{c.rank} {c.trial_id} ({c.status}{same}): best_{metric} = {c.value:.4f}"
                     + (f"  {params}" if params else ""))
    return "\n".join(lines)


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def summary(uri: str, metric: str) -> str:
    """The confirmation table (analysis.compare), or a pointer to it when analysis cannot build it."""
    try:
        import warnings

        from analysis import load
        from analysis.compare import confirmation_table

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = confirmation_table(load(uri), metric)
        # two configurations of one variant (two xbn ratios) are told apart by their swept values
        named = ("variant", "swept") if table["variant"].duplicated().any() else ("variant",)
        columns = [c for c in (*named, "n_completed", "test_mean", "test_ci_low", "test_ci_high",
                               "selection_mean", "sweep_best") if c in table.columns]
        return "confirmation (mean and 95% t-interval over seeds):\n" + table[columns].to_string(index=False)
    except Exception as exc:  # the runs are written either way; the table is a convenience
        print(f"note: no confirmation table ({type(exc).__name__}: {exc}); see `xbm-tune report {uri}`",
              file=sys.stderr)
        return f"confirm rows written to {uri}/results (stage = 'confirm')"
