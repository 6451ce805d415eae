"""Plan a sweep: validate everything before Ray starts or a folder is created.

Order matters for "bad input writes nothing": the space, the options, the base TrainConfig, the data
set and ``pretrained_path`` (opened once, here on the driver: ``check_data``), the searcher, the
scheduler, the fairness check, the experiment name and the ``--log`` loggers (their packages) are all
checked in ``prepare``. The searcher and
the scheduler it builds are the sweep's own (kept on the plan, built once): building them is what checks
the registry names, the search/warm-start pairing and the warm-start points.

Paths (``xbm.data.inputs.PATH_KEYS``) are absolute from ``prepare`` on: ``--set`` values against the launch
directory, space-file values against the file's folder (``tune.search.spaces.loader``). Trials run in their
own trial directories, so a relative path would point elsewhere there. ``sweep.json`` records them under
``paths`` (the non-swept ones): where the sweep's files are now. ``resume --set data_root=NEW`` and
``confirm --set data_root=NEW`` move a sweep to files elsewhere (``relocated``): ``paths`` is updated,
the trials read there, and their rows' ``config.data_root`` says so from then on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from analysis.contract import TRIALS_FILE, SweepRecord
from analysis.location import Folder
from tune.driver.options import SMOKE, SMOKE_DECLARED, SMOKE_OVERRIDES, SweepOptions
from tune.driver.workers import check_space
from tune.errors import SweepInputError
from tune.results.loggers import build_loggers
from tune.results.parquet import RESULTS, check_storage
from tune.results.trial_config import WORKERS_KEY, train_config
from tune.search.guards import GuardedScheduler
from tune.search.interfaces import SearchAlg
from tune.search.optuna_study import live_journal
from tune.search.rungs import recorded_rungs, rung_epochs, straddle_warning
from tune.search.schedulers import build_scheduler
from tune.search.searchers import build_searcher, check_search_options
from tune.search.spaces.fairness import GEOMETRIC_RUNGS
from tune.search.spaces.space import OPTUNA_SEARCHES, SearchSpace
from tune.search.warm_start import WarmStart
from xbm.data.inputs import PATH_KEYS, absolute_paths


@dataclass
class SweepPlan:
    """Everything a sweep needs, validated, before anything runs. ``searcher`` (with ``swept_space``, the
    Tune param_space of the swept parameters) and ``scheduler`` (filling ``stop_reasons``) are used by one
    Tuner: a plan runs once."""

    space: SearchSpace
    options: SweepOptions
    experiment: str
    max_epochs: int
    warnings: list[str] = field(default_factory=list)
    warm: WarmStart | None = None
    searcher: SearchAlg | None = None
    swept_space: dict[str, Any] = field(default_factory=dict)
    scheduler: GuardedScheduler | None = None
    stop_reasons: dict[str, str] = field(default_factory=dict)
    loggers: list[Any] = field(default_factory=list)  # --log: Ray's W&B / MLflow callbacks (tune.results.loggers)
    rungs: tuple[int, ...] | None = None  # ASHA's rung epochs (--rungs; tune.search.rungs), None for another scheduler

    @property
    def experiment_uri(self) -> str:
        return f"{self.options.storage_path()}/{self.experiment}"

    @property
    def results_uri(self) -> str:
        return f"{self.experiment_uri}/{RESULTS}"

    @property
    def optuna_journal(self) -> str | None:
        """The live Optuna study's file (an Optuna searcher on a local folder), else None."""
        return live_journal(self.results_uri) if self.options.search in OPTUNA_SEARCHES else None


def prepare(space_name: str, options: SweepOptions) -> SweepPlan:
    """Load and check everything a sweep needs before Ray starts.

    Args:
        space_name: a shipped space's name (``quickstart``) or a YAML path.
        options: the sweep's options (the CLI's flags: ``tune.commands._arguments.options_from``).

    Returns:
        The plan :func:`tune.driver.sweep.run_sweep` runs: the space, its searcher and scheduler, the Parquet sink and
        the options as resolved (``--smoke-test`` applied, paths made absolute, the space's seed).

    Raises:
        SpaceError: the space file is invalid (naming the file and the key).
        SweepInputError: a flag that does not fit the space (a metric its trials do not report, a searcher that
            cannot sample it, a storage folder that holds another sweep).
        ValueError: the space's fixed values are not a valid ``TrainConfig``.
    """
    from tune.search.spaces import pin_space

    space, options, overrides = resolved_space(space_name, options)
    space.check_search(options.search)
    check_space(space, options)  # a space's own workers; each rank's share of the batch, named after the flag
    if options.workers > 1 and WORKERS_KEY not in space.base:  # the trials' TrainConfig knows them: config.workers
        space = pin_space(space, {WORKERS_KEY: options.workers})
    base = train_config(space.base)  # the fixed part alone must be a valid TrainConfig
    max_epochs = base.epochs
    check_metric(space, options.metric)
    check_data(_data_variants(space))
    if options.grace_period > max_epochs and options.scheduler != "fifo":
        raise SweepInputError(f"--grace-period must be <= the epoch budget ({max_epochs}), but got "
                              f"{options.grace_period}; lower it or raise --max-epochs")
    rungs = rung_epochs(options, space, max_epochs) if options.scheduler == "asha" else None
    warnings = space.fairness_warnings(rungs[0] if rungs else options.grace_period, options.scheduler)
    if warnings and options.strict:
        raise SweepInputError("unfair early stopping (--strict):\n  " + "\n  ".join(warnings))
    warnings += filter(None, [space.combination_warning()])
    if rungs and options.rungs == GEOMETRIC_RUNGS:  # placed rungs are the user's (or the schedule's) choice
        warnings += filter(None, [straddle_warning(tuple(r for r in rungs if r < max_epochs), space)])
    warm = None
    if options.warm_start:
        check_search_options(options)  # before reading the old sweep: --warm-start needs optuna
        warm = _warm_start(options, space)
    # the study stays in memory until the sweep's folder exists (tune.driver.sweep.start keeps it in the journal)
    searcher, swept_space = build_searcher(space, options, max_epochs, warm)
    stop_reasons: dict[str, str] = {}
    # the rungs placed above, listed: --rungs schedule enumerates the space's drops once, not again here
    scheduler = build_scheduler(recorded_rungs(options, rungs), max_epochs, stop_reasons, space)
    experiment = options.experiment_name(space.name)
    options = options.replace(name=experiment)
    check_storage(options.storage_path())  # a missing bucket or rejected credentials: one error, now
    if Folder(options.storage_path()).exists(experiment):
        raise SweepInputError(f"experiment {experiment!r} already exists in {options.storage_path()}: "
                              f"choose another --name, or continue it with `xbm-tune resume "
                              f"{options.storage_path()}/{experiment}`")
    loggers = build_loggers(options.loggers, options.storage_path(), experiment)  # a missing package: exit 2
    return SweepPlan(space, options, experiment, max_epochs, warnings, warm, searcher, swept_space, scheduler,
                     stop_reasons, loggers, rungs)


def resolved_space(space_name: str, options: SweepOptions) -> tuple[SearchSpace, SweepOptions, dict[str, Any]]:
    """The space with the values the flags set (``--set``, ``--max-epochs``, ``--seed`` unless the space fixes or
    sweeps the seed; ``--smoke-test``'s reduction), the options resolved against it, and those overrides. The file
    is read as written first: what it declares decides what the flags add. ``--workers-per-trial`` is added after
    ``check_space``, which names the flag when the batch does not split (the config's own check would not)."""
    from tune.search.spaces import load_space, pin_space

    written = load_space(space_name, smoke=options.smoke_test)
    if options.smoke_test:
        options = smoke_options(written, options)
    options = options.replace(overrides=absolute_paths(options.overrides, Path.cwd()))
    overrides = dict(options.overrides)
    if options.max_epochs is not None:
        overrides["epochs"] = options.max_epochs
    if not {"seed"} & (set(written.base) | set(written.params) | set(overrides)):
        overrides["seed"] = options.seed
    space = pin_space(written, overrides) if overrides else written
    return space, options.for_space(space.is_grid), overrides


def smoke_options(space: SearchSpace, options: SweepOptions) -> SweepOptions:
    """``--smoke-test``'s options: a space with a ``smoke:`` section runs that reduction (``SMOKE_DECLARED``:
    its own data and grid at toy sizes, each point once, to its end); any other the toy data set
    (``SMOKE``, ``SMOKE_OVERRIDES``). ``--set`` values win over both."""
    if space.smoke:
        return options.replace(**SMOKE_DECLARED, max_concurrent=options.max_concurrent)
    return options.replace(**SMOKE, overrides={**SMOKE_OVERRIDES, **options.overrides},
                           max_concurrent=options.max_concurrent)


def check_metric(space: SearchSpace, metric: str) -> None:
    """A ``recall_at_K`` metric (or ``test_recall_at_K``) must be one the trials report: K in the data set's
    K set, or in ``eval_ks``, for every data set and ``eval_ks`` the space can give; ``nmi`` needs ``eval_nmi``;
    ``val_oneshot_error`` a validation split (``val_fraction`` > 0) with one-shot episodes (``oneshot_episodes``).
    Otherwise every epoch would report it as NaN and the scheduler would rank trials on nothing."""
    import re

    from xbm.data import recall_ks

    def values(key):
        if key in space.params:
            return space.params[key].possible_values() or [space.base.get(key)]
        return [space.base.get(key)]
    if metric == "nmi" and False in values("eval_nmi"):
        raise SweepInputError("--metric nmi is never reported where eval_nmi is false: set eval_nmi=true (the "
                              "default) or choose another --metric")
    if metric == "val_oneshot_error":   # the validation split's one-shot episodes: both must exist
        if 0 in values("oneshot_episodes") or any(not v for v in values("val_fraction")):
            raise SweepInputError("--metric val_oneshot_error is never reported where val_fraction is 0 or "
                                  "oneshot_episodes is 0 (it scores one-shot episodes on the validation classes): "
                                  "set val_fraction > 0 (and val_by=superclass to hold out whole super-classes)")
    match = re.fullmatch(r"(?:test_)?recall_at_(\d+)", metric)
    if match is None:
        return
    k = int(match.group(1))
    for dataset in values("dataset"):
        for eval_ks in values("eval_ks"):
            chosen = {key: v for key, v in (("dataset", dataset), ("eval_ks", eval_ks)) if v is not None}
            cfg = train_config({**space.base, **chosen})
            ks = cfg.recall_ks(recall_ks(cfg.dataset))
            if k not in ks:
                raise SweepInputError(
                    f"--metric {metric} is never reported: dataset {cfg.dataset!r} with eval_ks={cfg.eval_ks!r} "
                    f"reports recall_at_K for K in {list(ks)}; choose one of them, or add K with --set eval_ks=...")


def check_data(configs: Iterable[Mapping[str, Any]]) -> None:
    """Open each distinct data set (and ``pretrained_path``) the configs read, once, on this machine:
    ``xbm.data.checks.check_inputs`` (the data set's own layout check; no image decoded). A missing or wrong
    path raises SweepInputError carrying the data set's layout message (exit 2, before Ray starts)."""
    from xbm.data.checks import check_inputs

    seen = set()
    for config in configs:
        cfg = train_config(config)
        key = (cfg.dataset, cfg.val_fraction, cfg.val_by, cfg.train_on, *(getattr(cfg, k) for k in PATH_KEYS))
        if key in seen:
            continue
        seen.add(key)
        try:
            check_inputs(cfg)
        except (ValueError, FileNotFoundError) as exc:
            raise SweepInputError(str(exc)) from exc


def _data_variants(space: SearchSpace) -> list[dict[str, Any]]:
    """The base config, and one config per value of a swept path key (e.g. a choice of pretrained_path
    files), for ``check_data``. A swept ``dataset`` is checked only in its trials."""
    variants = [dict(space.base)]
    for key in PATH_KEYS:
        values = space.params[key].possible_values() if key in space.params else None
        variants += [{**space.base, key: value} for value in values or ()]
    return variants


def relocated(record: SweepRecord, changes: Mapping[str, Any], allowed: tuple[str, ...],
              command: str) -> dict[str, Any]:
    """The sweep's recorded paths (``sweep.json`` ``paths``) updated with ``changes`` (``--set`` on
    ``resume`` / ``confirm``), made absolute against the working directory. A key outside ``allowed``,
    or a swept one (each trial has its own value), raises SweepInputError."""
    swept = set(record.swept)
    for key in changes:
        if key not in allowed or key in swept:
            raise SweepInputError(
                f"{command} --set must name one of {list(k for k in allowed if k not in swept)} (files at another "
                f"location), but got {key!r}: other keys change what the trials learn; start a new sweep, or "
                f"re-run chosen configs with `xbm-tune confirm PATH --set KEY=VALUE`")
    return {**record.paths, **absolute_paths(changes, Path.cwd())}


def _warm_start(options: SweepOptions, space: SearchSpace) -> WarmStart:
    from tune.search.warm_start import warm_start_points

    check_storage(options.warm_start)
    if not Folder(options.warm_start).exists(f"{RESULTS}/{TRIALS_FILE}"):
        raise SweepInputError(f"--warm-start must name a sweep folder holding {RESULTS}/{TRIALS_FILE}, "
                              f"but got {options.warm_start!r}")
    return warm_start_points(options.warm_start, space, options.metric, options.mode)
