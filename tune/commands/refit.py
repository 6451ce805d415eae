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
``--best``: the sweep-stage trial ``confirm`` would rank first (``select_top``: completed before stopped early,
then by ``best_<metric>``; a several-objective sweep's Pareto front).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from analysis.contract import REFIT_STAGE, SweepRecord
from tune.commands import plain
from tune.commands.confirm import add_rerun_arguments, check_configs, rerun_options, rerun_seeds_and_overrides
from tune.options import SweepInputError

#: --classes -> the config's train_on (xbm.config.TRAIN_ON)
CLASSES = ("train+val", "all")
#: data sets whose test protocol is external, and how to run it on the refit's export
EXTERNAL_PROTOCOLS = {"omniglot": "Omniglot's 20-way one-shot runs: `xbm-tune export {sweep} --stage refit --best "
                                  "--out DIR`, then `xbm-tune oneshot DIR --runs omniglot/all_runs`"}


def refit_configs(trial: Mapping[str, Any], seeds: Sequence[int], classes: str,
                  overrides: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The trial's flat dotted config (absent parameters dropped) once per seed, with ``train_on`` = ``classes``
    and ``overrides``; with ``all``, ``val_fraction`` 0 as well (the validation classes, or super-classes, the
    sweep held out are trained on): nothing else changes."""
    from tune.results.parquet import config_of

    config = {k: v for k, v in config_of(trial).items() if v is not None}
    # train_on=all holds out val_fraction of the classes (a sweep on every class but those): the refit adds them
    back = {"val_fraction": 0.0} if classes == "all" else {}
    return [{**config, **dict(overrides or {}), **back, "train_on": classes, "seed": int(s)} for s in seeds]


def pick(rows: Sequence[Mapping[str, Any]], record: SweepRecord, trial_id: str | None) -> Mapping[str, Any]:
    """The row of ``--trial ID`` (a sweep or confirm trial), or ``--best``: the sweep-stage trial ``confirm``'s
    selection ranks first."""
    from tune.commands.confirm import front_rows, select_top

    if trial_id is not None:
        found = [r for r in rows if str(r.get("trial_id")) == trial_id and r.get("stage") != REFIT_STAGE]
        if not found:
            known = sorted(str(r.get("trial_id")) for r in rows if r.get("stage") != REFIT_STAGE)[:10]
            raise SweepInputError(f"--trial {trial_id!r} is not a sweep or confirm trial of this sweep; its trials "
                                  f"include {known}")
        return found[0]
    best = select_top(front_rows(rows, record), record.metric, record.mode, 1)
    if not best:
        raise SweepInputError(f"nothing to refit: no completed or early-stopped sweep trial has a finite "
                              f"best_{record.metric}")
    return next(r for r in rows
                if str(r.get("trial_id")) == best[0].trial_id and (r.get("stage") or "sweep") == "sweep")


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


@dataclass
class RefitPlan:
    uri: str
    record: SweepRecord
    trial: Mapping[str, Any]  # the chosen trials.parquet row
    seeds: list[int]
    configs: list[dict[str, Any]]
    overrides: dict[str, Any]  # --set, paths made absolute


def plan(args: argparse.Namespace) -> RefitPlan:
    """Read and check everything before Ray starts; any bad input raises SweepInputError (exit 2)."""
    from tune.results.record import read_record
    from tune.search.warm_start import read_trials

    if args.seeds < 1:
        raise SweepInputError(f"--seeds must be >= 1, but got --seeds {args.seeds}")
    uri = str(args.path).rstrip("/")
    try:
        record = read_record(uri)
        trial = pick(read_trials(uri), record, args.trial)
        seeds, overrides = rerun_seeds_and_overrides(args, record)
        for key in ("train_on", "seed"):
            if key in overrides:
                raise SweepInputError(f"--set {key}=... is the refit's own: use --classes and --seed-start")
        configs = refit_configs(trial, seeds, args.classes, {**record.paths, **overrides})
        check_configs(configs)
    except SweepInputError:
        raise
    except ValueError as exc:
        raise SweepInputError(str(exc)) from exc
    return RefitPlan(uri, record, trial, seeds, configs, overrides)


def describe(p: RefitPlan, classes: str) -> str:
    config, metric = p.configs[0], p.record.metric
    head = (f"refitting trial {p.trial.get('trial_id')} ({p.trial.get('stage') or 'sweep'}, {p.trial.get('status')}, "
            f"best_{metric} = {p.trial.get(f'best_{metric}')}) on {classes} classes x {len(p.seeds)} seed(s) "
            f"{list(p.seeds)}, {config.get('epochs')} epochs")
    return "\n".join([head, *held_out_notes(p.trial, config, classes, p.uri)])


def held_out_notes(trial: Mapping[str, Any], config: Mapping[str, Any], classes: str, uri: str) -> list[str]:
    """What the refit's test values will be: none without held-out classes (the external protocol, if any)."""
    if classes == "all":
        dataset = str(config.get("dataset"))
        protocol = EXTERNAL_PROTOCOLS.get(dataset)
        if protocol is None:
            return [f"note: test metrics are not available for --classes all: every class of {dataset!r} is trained "
                    "on, and the data set defines no external test protocol"]
        return [f"note: --classes all trains on every class, so no test metric is written; {dataset}'s test "
                f"protocol is external: {protocol.format(sweep=uri)}"]
    if float(trial.get("config.val_fraction") or 0.0) == 0.0:
        return ["note: val_fraction is 0: the sweep selected on the test classes, the refit trains on the trial's "
                "own classes, and its test values are optimistic"]
    return []


def run(args: argparse.Namespace, **init_kwargs) -> int:
    """Plan, print, run (unless --dry-run), summarise. ``init_kwargs`` go to ``ray.init``."""
    from tune.results.parquet import RESULTS
    from tune.sweep import run_configs

    p = plan(args)
    print(describe(p, args.classes))
    if args.dry_run:
        return 0
    outcome = run_configs(p.configs, rerun_options(p.record, args), f"{p.uri}/{RESULTS}", stage=REFIT_STAGE,
                          **init_kwargs)
    print(summary(p.uri, p.record.metric))
    if outcome.interrupted:
        sys.stdout.flush()
        print("interrupted: the refit runs stopped before they finished", file=sys.stderr)
        return 1
    trials = outcome.trials
    refit = trials[trials["stage"] == REFIT_STAGE] if "stage" in trials else trials.iloc[:0]
    return 0 if (refit["status"] == "completed").any() else 1


def summary(uri: str, metric: str) -> str:
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
