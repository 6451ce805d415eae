"""The refit stage (``xbm-tune refit``): the chosen trial's configuration retrained on more classes, over seeds, as
``stage = "refit"`` rows of the sweep folder. :func:`pick` chooses the trial, :func:`refit_configs` its runs,
:func:`plan_refit` reads and checks everything before Ray starts, :func:`held_out_notes` says what its test values
will be."""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from analysis.contract import REFIT_STAGE, SWEEP_STAGE, SweepRecord
from tune.errors import SweepInputError
from tune.stages.rerun import check_configs, rerun_overrides, rerun_seeds
from tune.stages.selection import front_rows, select_top

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
                if str(r.get("trial_id")) == best[0].trial_id and (r.get("stage") or SWEEP_STAGE) == SWEEP_STAGE)


@dataclass
class RefitPlan:
    uri: str
    record: SweepRecord
    trial: Mapping[str, Any]  # the chosen trials.parquet row
    seeds: list[int]
    configs: list[dict[str, Any]]
    overrides: dict[str, Any]  # --set, paths made absolute


def plan_refit(args: argparse.Namespace) -> RefitPlan:
    """``xbm-tune refit``'s arguments -> its plan; any bad input raises SweepInputError (exit 2)."""
    from tune.results.record import read_record
    from tune.search.warm_start import read_trials

    if args.seeds < 1:
        raise SweepInputError(f"--seeds must be >= 1, but got --seeds {args.seeds}")
    uri = str(args.path).rstrip("/")
    try:
        record = read_record(uri)
        trial = pick(read_trials(uri), record, args.trial)
        seeds, overrides = rerun_seeds(record, args.seeds, args.seed_start), rerun_overrides(args.overrides)
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
