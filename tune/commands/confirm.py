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
(``tune.driver.sweep.run_configs``). ``--dry-run`` prints the selection and runs nothing.

Paths: each run reads the sweep's files where ``sweep.json`` says they are now (``paths``); a
``--set`` path (relative to the working directory) moves them, and is recorded there. The data set is
opened once on the driver before Ray starts: a wrong path exits 2.

Selection (``tune.stages.selection``): the sweep-stage trials with a finite ``best_<metric>`` (the sweep's metric
and mode from ``results/sweep.json``), completed before stopped early, then by ``best_<metric>``, each
configuration once. Fewer than K candidates: all of them, with a note. A sweep with several objectives
(``--metric`` repeated) takes its candidates from its Pareto front, ranked by the first objective.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from analysis.contract import CONFIRM_STAGE
from tune.commands import plain
from tune.commands._arguments import add_rerun_arguments
from tune.results.parquet import RESULTS
from tune.stages.selection import Candidate

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


def run(args: argparse.Namespace, **init_kwargs: Any) -> int:
    """Select the top configs, print them, rerun them over seeds (unless --dry-run) and summarise.

    Args:
        args: the parsed arguments of ``xbm-tune confirm`` (``add_arguments``).
        init_kwargs: passed to ``ray.init`` (tests give a local address or resources).

    Returns:
        The exit status: 0 when a confirm run completed (or --dry-run), 1 when none did or Ctrl-C stopped them.

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    from tune.driver.sweep import run_configs
    from tune.results.record import record_paths
    from tune.stages.confirm import plan_confirm
    from tune.stages.rerun import rerun_options
    from xbm.data.inputs import RELOCATABLE_KEYS

    p = plan_confirm(args)
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
    outcome = run_configs(p.configs, rerun_options(p.record, args), f"{p.uri}/{RESULTS}", stage=CONFIRM_STAGE,
                          **init_kwargs)
    print(confirmation_summary(p.uri, metric))
    # Ctrl-C: Ray's Tuner.fit returned early (tune.driver.sweep.fit); `resume` does not continue these
    if outcome.interrupted:
        sys.stdout.flush()
        print("interrupted: the confirm runs stopped before they finished; the summary above covers the finished "
              "ones", file=sys.stderr)
        return 1
    trials = outcome.trials
    confirm = trials[trials["stage"] == CONFIRM_STAGE] if "stage" in trials else trials.iloc[:0]
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


def confirmation_summary(uri: str, metric: str) -> str:
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
