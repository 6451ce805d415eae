"""``xbm-tune refit SWEEP --best | --trial ID [--seeds N] [--classes train+val | all]``: the chosen configuration
retrained on more classes, over seeds, as the sweep's ``refit`` stage; its product is exported with
``xbm-tune export SWEEP --stage refit --best``.

A search holds the validation classes out to select on; once it has chosen, those classes are data the product
should learn from (scikit-learn's ``GridSearchCV(refit=True)`` refits the best estimator on the whole training
set). Each run is the trial's configuration with only these changed:

* ``train_on`` (``--classes``): ``train+val`` (default) trains on the training and validation classes together,
  the test classes still held out and evaluated every epoch (``eval_split = test``); ``all`` trains on every
  class, validation ones included (``val_fraction`` set to 0), for a data set whose test protocol is external
  (Omniglot's one-shot runs: ``xbm-tune oneshot``);
* ``seed``: ``s0 + 1 .. s0 + N``, ``s0`` the sweep's seed (``--seed-start`` to change), as ``confirm``'s;
* ``--set KEY=VALUE``, and the sweep's files where ``sweep.json`` says they are now.

Epochs are the trial's (``--set epochs=N`` to change). With nothing held out to select on, a run keeps its last
epoch's weights (``tune.trial.loop``), and the report takes its last epoch's test value (``analysis.refit``).
``--best``: the sweep-stage trial ``confirm`` would rank first (``tune.stages.selection.select_top``: completed
before stopped early, then by ``best_<metric>``; a several-objective sweep's Pareto front).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from analysis.contract import REFIT_STAGE
from tune.commands import plain
from tune.commands._arguments import add_rerun_arguments
from tune.stages.refit import CLASSES, RefitPlan, held_out_notes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = plain(__doc__.split("\n\n")[0])
    parser.epilog = ("examples:\n  xbm-tune refit ~/xbm_sweeps/quickstart-20261121-081500 --best --seeds 3\n"
                     "  xbm-tune refit PATH --trial 3f2a_00004 --classes all --set epochs=80 --dry-run")
    parser.add_argument("path", metavar="SWEEP", help="the sweep folder (holding results/sweep.json)")
    which = parser.add_argument_group("what to refit").add_mutually_exclusive_group(required=True)
    which.add_argument("--best", action="store_true", help="the sweep's best finished trial")
    which.add_argument("--trial", metavar="ID", help="this trial's configuration")
    what = parser.add_argument_group("how")
    what.add_argument("--seeds", type=int, default=3, help="runs (default %(default)s)")
    what.add_argument("--seed-start", type=int, default=None, help="first seed (default: the sweep's seed + 1)")
    what.add_argument("--classes", choices=CLASSES, default="train+val",
                      help="train+val: the training and validation classes, the test ones held out (default); "
                           "all: every class (a data set whose test protocol is external)")
    what.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                      help="change a config value for every run (e.g. epochs=80, data_root=/data)")
    what.add_argument("--dry-run", action="store_true", help="print the runs and run nothing")
    add_rerun_arguments(parser)


def describe_refit(p: RefitPlan, classes: str) -> str:
    config, metric = p.configs[0], p.record.metric
    head = (f"refitting trial {p.trial.get('trial_id')} ({p.trial.get('stage') or 'sweep'}, {p.trial.get('status')}, "
            f"best_{metric} = {p.trial.get(f'best_{metric}')}) on {classes} classes x {len(p.seeds)} seed(s) "
            f"{list(p.seeds)}, {config.get('epochs')} epochs")
    return "\n".join([head, *held_out_notes(p.trial, config, classes, p.uri)])


def run(args: argparse.Namespace, **init_kwargs: Any) -> int:
    """Plan the refits, print them, run them (unless --dry-run) and summarise.

    Args:
        args: the parsed arguments of ``xbm-tune refit`` (``add_arguments``).
        init_kwargs: passed to ``ray.init`` (tests give a local address or resources).

    Returns:
        The exit status: 0 when a refit completed (or --dry-run), 1 when none did or Ctrl-C stopped them.

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    from tune.driver.sweep import run_configs
    from tune.results.parquet import RESULTS
    from tune.stages.refit import plan_refit
    from tune.stages.rerun import rerun_options

    p = plan_refit(args)
    print(describe_refit(p, args.classes))
    if args.dry_run:
        return 0
    outcome = run_configs(p.configs, rerun_options(p.record, args), f"{p.uri}/{RESULTS}", stage=REFIT_STAGE,
                          **init_kwargs)
    print(refit_summary(p.uri, p.record.metric))
    if outcome.interrupted:
        sys.stdout.flush()
        print("interrupted: the refit runs stopped before they finished", file=sys.stderr)
        return 1
    trials = outcome.trials
    refit = trials[trials["stage"] == REFIT_STAGE] if "stage" in trials else trials.iloc[:0]
    return 0 if (refit["status"] == "completed").any() else 1


def refit_summary(uri: str, metric: str) -> str:
    """The refit's test values per seed and their interval (analysis.refit), or a pointer to the rows."""
    try:
        import warnings

        from analysis import load
        from analysis.refit import refit_groups

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            groups = refit_groups(load(uri), metric)
        lines = [f"refit (final {metric} on the held-out test classes; mean and 95% t-interval over seeds):"]
        for g in groups:
            iv = g.interval
            lines += [g.frame[["trial_id", "seed", "classes", "train_classes", "completed", "test"]].to_string(
                index=False), f"mean {iv.mean:.4f} [{iv.low:.4f}, {iv.high:.4f}] over {iv.n} run(s)"]
        return "\n".join(lines + [f"export: xbm-tune export {uri} --stage refit --best --out DIR"])
    except Exception as exc:  # the runs are written either way; the table is a convenience
        print(f"note: no refit table ({type(exc).__name__}: {exc}); see `xbm-tune report {uri}`", file=sys.stderr)
        return f"refit rows written to {uri}/results (stage = 'refit')"
