"""Run a sweep: validate everything, start or join Ray, build the ``Tuner``, fit, summarise; resume one;
run fixed configs (the ``confirm`` stage).

Order matters for "bad input writes nothing": the space, the options, the base TrainConfig, the data
set and ``pretrained_path`` (opened once, here on the driver: ``check_data``), the searcher, the
scheduler, the fairness check and the experiment name are all checked before Ray starts or a folder is
created (``prepare``). Only then ``run_sweep`` connects, writes ``results/sweep.json`` and fits.

Paths (``xbm.inputs.PATH_KEYS``) are absolute from ``prepare`` on: ``--set`` values against the launch
directory, space-file values against the file's folder (``tune.spaces.loader``). Trials run in their
own trial directories, so a relative path would point elsewhere there. ``sweep.json`` records them under
``paths`` (the non-swept ones): where the sweep's files are now. ``resume --set data_root=NEW`` and
``confirm --set data_root=NEW`` move a sweep to files elsewhere: ``paths`` is updated, the trials read
there, and their rows' ``config.data_root`` says so from then on.

Tune settings every sweep shares: ``reuse_actors=True`` (issue 4 measured 16 trivial trials at ~25 s
without it and ~3.5 s with it in Ray 2.60: a new actor per trial re-imports torch and the trainer),
``FailureConfig(max_failures)`` (a crashed trial restarts from its last checkpoint),
``CheckpointConfig(num_to_keep=KEEP_CHECKPOINTS)`` (the trainer state is checkpointed each epoch; the
last two are kept, see below), readable trial names (``TrialNamer``), the Parquet sink as a callback, and
what a running sweep shows (docs/sweeps.md "Watching a sweep"): the sweep's best published to the trials
(``tune.live.SweepBest``), TensorBoard runs per trial (``SweepTensorBoard``), and for optuna sweeps on a
local folder the searcher's study in ``results/optuna.journal`` (``tune.optuna_study``).
"""
from __future__ import annotations

import functools
import os
import subprocess
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

from ray import tune
from ray.tune.schedulers import FIFOScheduler

from tune.options import SMOKE, SMOKE_OVERRIDES, SweepInputError, SweepOptions
from tune.parquet import RESULTS, SWEEP_JSON, Storage, check_storage
from tune.schedulers import build_scheduler
from tune.searchers import FixedConfigs, build_searcher, check_search_options
from tune.live import SweepBest
from tune.optuna_study import journal_storage, live_journal
from tune.sink import ParquetSink
from tune.tensorboard_logger import SweepTensorBoard
from tune.trainable import TrialNamer, make_trainable, train_config, trial_dirname
from xbm.inputs import PATH_KEYS, RELOCATABLE_KEYS, absolute_paths

# The experiment state (what `resume` restores) is saved at most this often; Tune's "auto" can wait
# minutes on long sweeps, and a killed driver loses what happened since.
os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "10")
# Tune snapshots the experiment state whenever a trial has replaced num_to_keep checkpoints since the last
# snapshot; that is the crash safety we want, and Tune's warning about it would repeat every epoch.
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
# Two, not one: a trial's older checkpoint is deleted as soon as its newer one is registered, but the
# snapshot naming the newer one reaches the storage only when its upload ends. With one kept, a driver
# killed during that upload left a snapshot naming a deleted checkpoint, and `resume` failed that trial
# ("Could not recover from checkpoint as it does not exist on storage anymore"; reproduced on S3 by
# tests/tune/test_s3.py). With two, the snapshot's checkpoint survives one more epoch, by which time the
# periodic snapshot (TUNE_GLOBAL_CHECKPOINT_S) has named a newer one, unless epochs are shorter than it.
KEEP_CHECKPOINTS = 2


@dataclass
class SweepPlan:
    """Everything a sweep needs, validated, before anything runs."""

    space: Any
    options: SweepOptions
    experiment: str
    max_epochs: int
    warnings: list[str] = field(default_factory=list)
    warm: Any = None

    @property
    def experiment_uri(self) -> str:
        return f"{self.options.storage_path()}/{self.experiment}"

    @property
    def results_uri(self) -> str:
        return f"{self.experiment_uri}/{RESULTS}"

    @property
    def optuna_journal(self) -> str | None:
        """The live Optuna study's file (optuna search on a local folder), else None."""
        return live_journal(self.results_uri) if self.options.search == "optuna" else None


@dataclass
class SweepOutcome:
    """What a finished ``fit`` leaves: the results folder and the trials table (pandas)."""

    experiment_uri: str
    results_uri: str
    trials: Any
    metric: str
    mode: str
    swept: tuple = ()

    def best(self) -> dict | None:
        column = f"best_{self.metric}"
        frame = self.trials.dropna(subset=[column]) if column in self.trials else self.trials.iloc[:0]
        if frame.empty:
            return None
        index = frame[column].idxmax() if self.mode == "max" else frame[column].idxmin()
        return frame.loc[index].to_dict()

    def counts(self) -> dict[str, int]:
        return self.trials["status"].value_counts().to_dict() if len(self.trials) else {}

    def exit_code(self) -> int:
        """0 when at least one trial completed or was stopped early by design, 1 when every trial failed."""
        counts = self.counts()
        return 0 if counts.get("completed", 0) + counts.get("stopped_early", 0) > 0 else 1


def prepare(space_name: str, options: SweepOptions) -> SweepPlan:
    """Load and check everything; raise ``SpaceError`` / ``SweepInputError`` / ``ValueError`` on bad input."""
    from tune.spaces import load_space

    if options.smoke_test:
        options = options.replace(**SMOKE, overrides={**SMOKE_OVERRIDES, **options.overrides},
                                  max_concurrent=options.max_concurrent)
    options = options.replace(overrides=absolute_paths(options.overrides, Path.cwd()))
    overrides = dict(options.overrides)
    if options.max_epochs is not None:
        overrides["epochs"] = options.max_epochs
    space = load_space(space_name, overrides=overrides or None)
    if "seed" not in space.base and "seed" not in space.params:
        space = load_space(space_name, overrides={**overrides, "seed": options.seed})
    options = options.for_space(space.is_grid)
    space.check_search(options.search)
    base = train_config(space.base)  # the fixed part alone must be a valid TrainConfig
    max_epochs = base.epochs
    check_data(_data_variants(space))
    if options.grace_period > max_epochs and options.scheduler != "fifo":
        raise SweepInputError(f"--grace-period must be <= the epoch budget ({max_epochs}), but got "
                              f"{options.grace_period}; lower it or raise --max-epochs")
    warnings = space.fairness_warnings(options.grace_period, options.scheduler)
    if warnings and options.strict:
        raise SweepInputError("unfair early stopping (--strict):\n  " + "\n  ".join(warnings))
    warm = None
    if options.warm_start:
        check_search_options(options)  # before reading the old sweep: --warm-start needs optuna
        warm = _warm_start(options, space)
    build_searcher(space, options, max_epochs, warm)  # registry names and search/warm-start pairing
    build_scheduler(options, max_epochs, {})
    experiment = options.experiment_name(space.name)
    options = options.replace(name=experiment)
    check_storage(options.storage_path())  # a missing bucket or rejected credentials: one error, now
    if Storage(options.storage_path()).exists(experiment):
        raise SweepInputError(f"experiment {experiment!r} already exists in {options.storage_path()}: "
                              f"choose another --name, or continue it with `xbm-tune resume "
                              f"{options.storage_path()}/{experiment}`")
    return SweepPlan(space, options, experiment, max_epochs, warnings, warm)


def check_data(configs: Iterable[Mapping[str, Any]]) -> None:
    """Open each distinct data set (and ``pretrained_path``) the configs read, once, on this machine:
    ``xbm.inputs.check_inputs`` (the data set's own layout check; no image decoded). A missing or wrong
    path raises SweepInputError carrying the data set's layout message (exit 2, before Ray starts)."""
    from xbm.inputs import check_inputs

    seen = set()
    for config in configs:
        cfg = train_config(config)
        key = (cfg.dataset, cfg.val_fraction, *(getattr(cfg, k) for k in PATH_KEYS))
        if key in seen:
            continue
        seen.add(key)
        try:
            check_inputs(cfg)
        except (ValueError, FileNotFoundError) as exc:
            raise SweepInputError(str(exc)) from exc


def _data_variants(space) -> list[dict[str, Any]]:
    """The base config, and one config per value of a swept path key (e.g. a choice of pretrained_path
    files), for ``check_data``. A swept ``dataset`` is checked only in its trials."""
    variants = [dict(space.base)]
    for key in PATH_KEYS:
        values = space.params[key].possible_values() if key in space.params else None
        variants += [{**space.base, key: value} for value in values or ()]
    return variants


def relocated(record: Mapping[str, Any], changes: Mapping[str, Any], allowed: tuple[str, ...],
              command: str) -> dict[str, Any]:
    """The sweep's recorded paths (``sweep.json`` ``paths``) updated with ``changes`` (``--set`` on
    ``resume`` / ``confirm``), made absolute against the working directory. A key outside ``allowed``,
    or a swept one (each trial has its own value), raises SweepInputError."""
    swept = set(record.get("space", {}).get("params", ()))
    for key in changes:
        if key not in allowed or key in swept:
            raise SweepInputError(
                f"{command} --set must name one of {list(k for k in allowed if k not in swept)} (files at another "
                f"location), but got {key!r}: other keys change what the trials learn; start a new sweep, or "
                f"re-run chosen configs with `xbm-tune confirm PATH --set KEY=VALUE`")
    return {**record.get("paths", {}), **absolute_paths(changes, Path.cwd())}


def record_paths(uri: str, record: dict[str, Any], paths: Mapping[str, Any]) -> None:
    """Store where the sweep's files are now in ``sweep.json`` (a no-op when they have not moved)."""
    if dict(paths) != record.get("paths", {}):
        record["paths"] = dict(paths)
        Storage(f"{uri.rstrip('/')}/{RESULTS}").write_json(SWEEP_JSON, record)


def _warm_start(options: SweepOptions, space):
    from tune.warm_start import warm_start_points

    check_storage(options.warm_start)
    if not Storage(options.warm_start).exists(f"{RESULTS}/trials.parquet"):
        raise SweepInputError(f"--warm-start must name a sweep folder holding {RESULTS}/trials.parquet, "
                              f"but got {options.warm_start!r}")
    return warm_start_points(options.warm_start, space, options.metric, options.mode)


@dataclass
class Built:
    """A Tuner and the driver-side objects it holds (tests and benchmarks read them after fit)."""

    tuner: tune.Tuner
    sink: ParquetSink
    searcher: Any
    scheduler: Any


def build_tuner(plan: SweepPlan, callbacks: tuple = ()) -> Built:
    """The Tuner for ``plan``; ``callbacks`` are extra Tune callbacks after the Parquet sink."""
    options = plan.options
    stop_reasons: dict[str, str] = {}
    journal = plan.optuna_journal
    study = (plan.experiment, journal_storage(journal)) if journal else None
    searcher, swept_space = build_searcher(plan.space, options, plan.max_epochs, plan.warm, study)
    scheduler = build_scheduler(options, plan.max_epochs, stop_reasons)
    sink = ParquetSink(None, plan.experiment, options.metric, options.mode, stage="sweep",
                       swept=tuple(plan.space.params), stop_reasons=stop_reasons, provenance=provenance())
    tune_config = tune.TuneConfig(
        metric=options.metric, mode=options.mode, search_alg=searcher, scheduler=scheduler,
        num_samples=options.num_samples, max_concurrent_trials=options.max_concurrent, reuse_actors=True,
        trial_name_creator=TrialNamer(list(plan.space.params)), trial_dirname_creator=trial_dirname)
    watch = [SweepBest(plan.experiment, options.metric, options.mode), SweepTensorBoard()]
    run_config = _run_config(options, plan.experiment, options.storage_path(), [sink, *watch, *callbacks])
    tuner = tune.Tuner(trainable(options, plan.experiment), param_space={**plan.space.base, **swept_space},
                       tune_config=tune_config, run_config=run_config)
    return Built(tuner, sink, searcher, scheduler)


def start(plan: SweepPlan, callbacks: tuple = ()) -> Built:
    """Write results/sweep.json and build the Tuner (the caller fits it; Ray must be connected)."""
    Storage(plan.results_uri).write_json(SWEEP_JSON, sweep_record(plan))
    return build_tuner(plan, callbacks)


def trainable(options: SweepOptions, sweep: str | None = None, paths: Mapping[str, Any] | None = None):
    """The trainable class; ``sweep`` (the experiment name) lets trials print the sweep's best so far;
    ``paths`` (a resumed sweep's recorded paths) replace the trials' own values."""
    return make_trainable(options.metric, options.mode,
                          {"cpu": options.cpus_per_trial, "gpu": options.gpus_per_trial}, paths, sweep)


def _run_config(options: SweepOptions, name: str, storage_path: str, callbacks: list) -> tune.RunConfig:
    return tune.RunConfig(
        name=name, storage_path=storage_path, callbacks=callbacks, verbose=1,
        failure_config=tune.FailureConfig(max_failures=options.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=KEEP_CHECKPOINTS))


def sweep_record(plan: SweepPlan) -> dict[str, Any]:
    """results/sweep.json: the options, metric, mode, space name, file and YAML text."""
    space = plan.space
    return {"experiment": plan.experiment, "stage": "sweep", "metric": plan.options.metric,
            "mode": plan.options.mode, "max_epochs": plan.max_epochs, "options": plan.options.to_dict(),
            "space": {"name": space.name, "path": str(space.path) if space.path else None,
                      "description": space.description, "text": space.text, "base": space.base,
                      "params": list(space.params)},
            "paths": {k: space.base[k] for k in PATH_KEYS if space.base.get(k) and k not in space.params},
            "fairness_warnings": plan.warnings, "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **provenance()}


def run_sweep(plan: SweepPlan, **init_kwargs) -> SweepOutcome:
    """Connect (or start) Ray, write sweep.json, fit, and return the outcome read back from Parquet."""
    from tune.cluster import connect, disconnect, print_info

    info = connect(plan.options.address, plan.options.dashboard, **init_kwargs)
    print_info(info)
    try:
        start(plan).tuner.fit()
        return outcome(plan.experiment_uri, plan.options.metric, plan.options.mode)
    finally:
        disconnect(info)


def resume_sweep(path: str, address: str | None = None, dashboard: bool = True,
                 paths: Mapping[str, Any] | None = None, **init_kwargs) -> SweepOutcome:
    """Continue a sweep whose driver died: finished trials stay finished, errored and unfinished ones
    continue from their last checkpoints (``Tuner.restore(resume_errored=True, restart_errored=False)``).

    ``paths`` (``--set data_root=NEW``) moves the sweep to files elsewhere (module docstring); the data
    set is checked before Ray starts either way."""
    from tune.cluster import connect, disconnect, print_info

    uri = path if "://" in path else os.path.abspath(os.path.expanduser(path))
    record = read_record(uri)
    if not tune.Tuner.can_restore(uri):
        raise SweepInputError(f"resume needs a sweep folder with Tune's experiment state, but {uri!r} has none "
                              f"(the driver died before Tune saved it): start the sweep again with a new --name")
    options = SweepOptions.from_record(record["options"])
    located = relocated(record, paths or {}, RELOCATABLE_KEYS, "resume")
    if not set(PATH_KEYS) & set(record.get("space", {}).get("params", ())):  # a swept path: in its trials
        check_data([{**record.get("space", {}).get("base", {}), **located}])
    record_paths(uri, record, located)
    info = connect(address, dashboard, **init_kwargs)
    print_info(info)
    try:
        tuner = tune.Tuner.restore(uri, trainable=trainable(options, record.get("experiment"), located),
                                   resume_unfinished=True,
                                   resume_errored=True, restart_errored=False)
        tuner.fit()
        return outcome(uri, record["metric"], record["mode"])
    finally:
        disconnect(info)


def read_record(uri: str) -> dict[str, Any]:
    check_storage(uri)
    storage = Storage(f"{uri.rstrip('/')}/{RESULTS}")
    if not storage.exists(SWEEP_JSON):
        raise SweepInputError(f"{uri!r} is not a sweep folder: {RESULTS}/{SWEEP_JSON} is missing")
    return storage.read_json(SWEEP_JSON)


def outcome(experiment_uri: str, metric: str, mode: str) -> SweepOutcome:
    results = f"{experiment_uri.rstrip('/')}/{RESULTS}"
    storage = Storage(results)
    table = storage.read_table("trials.parquet")
    frame = table.to_pandas() if table is not None else _empty_trials()
    record = storage.read_json(SWEEP_JSON) if storage.exists(SWEEP_JSON) else {}
    swept = tuple(record.get("space", {}).get("params", ()))
    return SweepOutcome(experiment_uri, results, frame, metric, mode, swept)


def _empty_trials():
    import pandas as pd

    return pd.DataFrame({"trial_id": [], "status": []})


@functools.cache
def provenance() -> dict[str, Any]:
    """git_sha (None outside a git checkout) and the installed package version."""
    try:
        version = metadata.version("xbm-tune")
    except metadata.PackageNotFoundError:
        version = None
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        sha = None
    return {"git_sha": sha, "package_version": version}


def run_configs(configs: list[Mapping[str, Any]], options: SweepOptions, results_dir: str,
                stage: str = "confirm", **init_kwargs) -> SweepOutcome:
    """Run fixed configs (flat dotted dicts; ``None`` = absent) to their full epochs: FIFO, no search, no
    early stopping. Rows go to the existing sweep's ``results_dir`` with ``stage``; Tune's own state goes
    to ``<sweep>/<stage>-<UTC timestamp>``. Bad configs raise ``ValueError`` before Ray starts."""
    from tune.cluster import connect, disconnect, print_info

    if not configs:
        raise SweepInputError("run_configs needs at least one config, but got none")
    for config in configs:
        train_config(config)
    sweep_uri = results_dir.rstrip("/").rsplit("/", 1)[0]
    record = read_record(sweep_uri)
    swept = tuple(record.get("space", {}).get("params", ()))
    sink = ParquetSink(results_dir, record.get("experiment", sweep_uri.rsplit("/", 1)[-1]), options.metric,
                       options.mode, stage=stage, swept=swept, provenance=provenance())
    tune_config = tune.TuneConfig(
        metric=options.metric, mode=options.mode, search_alg=FixedConfigs(configs, options.metric, options.mode),
        scheduler=FIFOScheduler(), num_samples=len(configs), max_concurrent_trials=options.max_concurrent,
        reuse_actors=True, trial_name_creator=TrialNamer([*swept, "seed"]), trial_dirname_creator=trial_dirname)
    name = f"{stage}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    info = connect(options.address, options.dashboard, **init_kwargs)
    print_info(info)
    try:
        best = SweepBest(name, options.metric, options.mode)  # the stage's best, in the trials' lines
        tuner = tune.Tuner(trainable(options, name), tune_config=tune_config,
                           run_config=_run_config(options, name, sweep_uri, [sink, best]))
        tuner.fit()
        return outcome(sweep_uri, options.metric, options.mode)
    finally:
        disconnect(info)
