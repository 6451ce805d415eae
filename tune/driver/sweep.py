"""Run a sweep: build the ``Tuner`` for a plan (``tune.driver.plan``), fit it inside one Ray session
(``tune.driver.cluster.ray_session``) and read the outcome back (``tune.results.record``); resume one; run fixed configs
(the ``confirm`` stage).

Tune settings every sweep shares: ``reuse_actors=True`` (measured: 16 trivial trials at ~25 s
without it and ~3.5 s with it in Ray 2.60: a new actor per trial re-imports torch and the trainer),
``FailureConfig(max_failures)`` (a crashed trial restarts from its last checkpoint),
``CheckpointConfig(num_to_keep=KEEP_CHECKPOINTS)`` (the trainer state is checkpointed every
``--checkpoint-period`` seconds and at the last epoch, ``tune.trial.checkpoints``; the last two are kept while a
trial runs, see below, and one when it ends: ``KeepLatestCheckpoint``), each trial's ``TrialPolicy`` (the
checkpoint period, and the scheduler's decision epochs, which ``eval_every`` never skips), the CPUs per
trial resolved once Ray is connected (``--cpus-per-trial auto``, ``tune.trial.resources``), readable trial names (``TrialNamer``), the Parquet sink as a callback, a copy of
the experiment state that a killed driver cannot tear (``tune.results.state_backup``, which ``resume`` puts back), and
what a running sweep shows (docs/sweeps.md "Watching a sweep"): the sweep's best published to the trials
(``tune.results.live.SweepBest``), TensorBoard runs per trial (``SweepTensorBoard``), and for optuna sweeps on a
local folder the searcher's study in ``results/optuna.journal`` (``tune.search.optuna_study``).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from ray import tune as ray_tune
from ray.tune.schedulers import FIFOScheduler

from analysis.location import absolute
from tune import moved
from tune.driver.cluster import ray_session
from tune.driver.options import SweepOptions
from tune.driver.checks import check_data
from tune.driver.plan import SweepPlan, relocated
from tune.driver.workers import LAUNCHER_CPU, check_node_gpus, launcher_resources, max_concurrent, worker_resources
from tune.errors import SweepInputError
from tune.results.live import SweepBest
from tune.results.record import SweepOutcome, outcome, provenance, read_record, record_paths, sweep_record, write_record
from tune.results.sink import ParquetSink
from tune.results.state_backup import StateBackup, repair_state
from tune.results.tensorboard_logger import SweepTensorBoard
from tune.results.trial_config import config_workers, train_config
from tune.search.optuna_study import journal_storage
from tune.search.rungs import recorded_rungs
from tune.search.schedulers import build_scheduler, decision_epochs
from tune.search.searchers import FixedConfigs, PrunedOptunaSearch
from tune.trial.base import TrialPolicy
from tune.trial.checkpoints import KeepLatestCheckpoint
from tune.trial.resources import resolve_cpus_per_trial
from tune.trial.trainable import TrialNamer, make_trainable, trial_dirname
from xbm.data.inputs import PATH_KEYS, RELOCATABLE_KEYS

log = logging.getLogger(__name__)

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
class Built:
    """A Tuner and the driver-side objects it holds (tests and benchmarks read them after fit)."""

    tuner: ray_tune.Tuner
    sink: ParquetSink
    searcher: Any
    scheduler: Any


def build_tuner(plan: SweepPlan, callbacks: tuple = ()) -> Built:
    """The Tuner for ``plan``; ``callbacks`` are extra Tune callbacks after the Parquet sink."""
    options = plan.options
    sink = ParquetSink(None, plan.experiment, options.metric, options.mode, stage="sweep",
                       swept=tuple(plan.space.params), stop_reasons=plan.stop_reasons, provenance=provenance(),
                       extra=dict(zip(options.extra_metrics, options.extra_modes)),
                       exploits=getattr(plan.scheduler, "exploits", None), gpus_per_worker=options.gpus_per_worker)
    tune_config = ray_tune.TuneConfig(
        metric=options.metric, mode=options.mode, search_alg=plan.searcher, scheduler=plan.scheduler,
        num_samples=tune_samples(plan.searcher, options.num_samples),
        max_concurrent_trials=tune_cap(plan.searcher, options.max_concurrent),
        reuse_actors=reuse_actors(options),
        trial_name_creator=TrialNamer(list(plan.space.params)), trial_dirname_creator=trial_dirname)
    watch = [SweepBest(plan.experiment, options.metric, options.mode), SweepTensorBoard(), *plan.loggers]
    run_config = _run_config(options, plan.experiment, options.storage_path(), [sink, *watch, *callbacks])
    policy = trial_policy(options, plan.scheduler, plan.max_epochs, plan.space.mutable)
    tuner = ray_tune.Tuner(trainable(options, plan.experiment, policy=policy),
                       param_space={**plan.space.base, **plan.swept_space},
                       tune_config=tune_config, run_config=run_config)
    return Built(tuner, sink, plan.searcher, plan.scheduler)


def start(plan: SweepPlan, callbacks: tuple = (), own_ray: bool = False) -> Built:
    """Resolve ``--cpus-per-trial auto`` on the connected cluster, write results/sweep.json (with the
    resolved number), keep an optuna searcher's study in the live journal, and build the Tuner (the caller
    fits it; Ray must be connected; ``own_ray``: this process started it, ``resolved_resources``)."""
    plan.options = resolved_resources(plan.options, own_ray)
    for warning in gpu_data_warnings(plan):
        log.warning("%s", warning)
    write_record(plan.results_uri, sweep_record(plan))
    journal = plan.optuna_journal
    if journal and isinstance(plan.searcher, PrunedOptunaSearch):
        plan.searcher.keep_study(plan.experiment, journal_storage(journal))
    return build_tuner(plan, callbacks)


def trial_policy(options: SweepOptions, scheduler, max_epochs: int, mutable: tuple[str, ...]) -> TrialPolicy:
    """Each trial's policy: the checkpoint period and the epochs its scheduler decides at (always
    evaluated); under PBT and PB2 those are its perturbation epochs, each with a full checkpoint (the donors'
    states), and the mutable keys. ``scheduler`` may be None under them (a resumed sweep: Tune restores it)."""
    if not options.population_based:
        return TrialPolicy(options.checkpoint_period, decision_epochs(scheduler, max_epochs))
    interval = options.perturbation_interval
    return TrialPolicy(options.checkpoint_period, tuple(range(interval, max_epochs + 1, interval)), interval, mutable)


def resolved_resources(options: SweepOptions, own_ray: bool = False) -> SweepOptions:
    """``options`` with ``cpus_per_trial`` a number (``auto`` resolved on the connected cluster's nodes: the
    CPUs that come with one worker's GPUs), checked against the nodes' GPUs (a trial's GPUs must fit on
    one node: SweepInputError naming every node's count), and for multi-worker trials ``max_concurrent``
    capped to the trials whose workers fit together (``tune.driver.workers``; refused when none ever fits on a Ray
    this process started, ``own_ray``)."""
    import ray

    needs_nodes = options.gpus_per_trial > 0 or options.workers > 1
    nodes = ray.nodes() if needs_nodes else ()
    check_node_gpus(options, nodes)
    options = options.replace(cpus_per_trial=resolve_cpus_per_trial(options.cpus_per_trial, options.gpus_per_worker,
                                                                     nodes, options.workers, LAUNCHER_CPU))
    return options.replace(max_concurrent=max_concurrent(options, nodes, own_ray))


def tune_samples(search_alg: Any, num_samples: int | None) -> int | None:
    """``TuneConfig.num_samples``: how often Tune asks the searcher for a trial. Fixed configs (a conditional
    grid's points, already repeated ``--num-samples`` times) are one trial each; any other searcher repeats the
    space ``--num-samples`` times (Ray's grid) or is asked that many times."""
    return search_alg.total if isinstance(search_alg, FixedConfigs) else num_samples


def tune_cap(search_alg, max_concurrent: int | None) -> int | None:
    """``TuneConfig.max_concurrent_trials`` for ``search_alg``: Tune applies it only to a ``Searcher`` (in a
    ``ConcurrencyLimiter``) and ignores it, with a warning, for Ray's variant generator (grid and random
    search), whose own cap is its ``max_concurrent``: that is set here instead. Multi-worker trials rely on
    the cap (``tune.driver.workers.max_concurrent``)."""
    from ray.tune.search.basic_variant import BasicVariantGenerator

    if not isinstance(search_alg, BasicVariantGenerator):
        return max_concurrent
    search_alg.max_concurrent = int(max_concurrent or 0)  # 0: no cap
    return None


def reuse_actors(options: SweepOptions) -> bool:
    """Tune reuses a one-worker trial's actor for the next trial; a multi-worker trial's launcher ends with
    its trial, taking its Train workers with it (a reused launcher would have to wait for them)."""
    return options.workers == 1


def gpu_data_warnings(plan: SweepPlan) -> list[str]:
    """For a GPU sweep: one warning per data set whose images are decoded live every epoch (over the
    in-memory budget, no ``image_cache``). A swept data set is not looked at (its trials build it)."""
    if plan.options.gpus_per_trial <= 0 or "dataset" in plan.space.params or "image_cache" in plan.space.params:
        return []
    from xbm.data.checks import live_decode_warning  # torch: only when the sweep starts

    text = live_decode_warning(train_config(plan.space.base), plan.options.cpus_per_trial)
    return [text] if text else []


def trainable(options: SweepOptions, sweep: str | None = None, paths: Mapping[str, Any] | None = None,
              policy: TrialPolicy | None = None):
    """The trainable class; ``sweep`` (the experiment name) lets trials print the sweep's best so far;
    ``paths`` (a resumed sweep's recorded paths) replace the trials' own values; ``policy`` defaults to the
    options' checkpoint period and no decision epochs (FIFO). ``options`` as ``resolved_resources`` returns
    them (each command resolves once, on the connected cluster)."""
    policy = policy or TrialPolicy(options.checkpoint_period)
    return make_trainable(options.metric, options.mode, launcher_resources(options), paths, sweep, policy,
                          options.workers, worker_resources(options))


def _run_config(options: SweepOptions, name: str, storage_path: str, callbacks: list) -> ray_tune.RunConfig:
    # PBT/PB2: an exploit restores a donor's checkpoint from its last perturbation, which a newer one
    # (num_to_keep) or the donor's end (KeepLatestCheckpoint) would have deleted: keep them all until the end
    pbt = options.population_based
    return ray_tune.RunConfig(
        name=name, storage_path=storage_path, callbacks=[*callbacks, KeepLatestCheckpoint(at_end=pbt), StateBackup()],
        verbose=1,
        failure_config=ray_tune.FailureConfig(max_failures=options.max_failures),
        checkpoint_config=ray_tune.CheckpointConfig(num_to_keep=None if pbt else KEEP_CHECKPOINTS))


class _RayInterrupt(logging.Filter):
    """On Ray Tune's logger during a fit: notes the warning Ray's signal handler logs when it stops the run
    ("Stop signal received", SIGINT or SIGUSR1), and replaces the ``Tuner.restore(...)`` in Ray's closing
    "Resume experiment with:" line by ``hint`` (this project's command; the line is dropped without one)."""

    def __init__(self, hint: str | None) -> None:
        super().__init__()
        self.hint = hint
        self.seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text.startswith("Stop signal received"):
            self.seen = True
        elif "Tuner.restore(" in text:
            head = text.split("\nResume", 1)[0]
            record.msg, record.args = (f"{head}\nResume with: {self.hint}" if self.hint else head), ()
        return True


def fit(tuner: ray_tune.Tuner, hint: str | None = None) -> bool:
    """``tuner.fit()``; True when it was interrupted before its trials finished.

    Ray 2.60's ``Tuner.fit`` handles the first SIGINT (Ctrl-C) itself (``ray.tune.tune._setup_signal_catching``):
    its handler logs "Stop signal received", puts the previous handler back (a second Ctrl-C raises
    KeyboardInterrupt), and the run loop stops, saves the experiment state and returns the ResultGrid as if
    the sweep had ended, so no KeyboardInterrupt reaches the caller. An interrupted fit is told by that log
    record and, should the record not come (a changed wording, Ray's logger silenced), by its trials: a fit
    that runs to its end leaves every trial terminated or errored, an interrupted one leaves pending,
    running or paused ones. ``hint`` replaces Ray's ``Tuner.restore(...)`` advice (``_RayInterrupt``)."""
    watch = _RayInterrupt(hint)
    ray_logger = logging.getLogger("ray.tune.tune")
    ray_logger.addFilter(watch)
    try:
        grid = tuner.fit()
    finally:
        ray_logger.removeFilter(watch)
    return watch.seen or unfinished(grid) > 0


def unfinished(grid) -> int:
    """Trials of a ResultGrid neither terminated nor errored."""
    return len(grid) - grid.num_terminated - grid.num_errors


def resume_hint(uri: str) -> str:
    return f"xbm-tune resume {uri}"


def run_sweep(plan: SweepPlan, **init_kwargs) -> SweepOutcome:
    """Connect (or start) Ray, write sweep.json, fit, and return the outcome read back from Parquet
    (``interrupted`` when Ctrl-C stopped the fit: ``fit``)."""
    with ray_session(plan.options.address, plan.options.dashboard, **init_kwargs) as ray_info:
        interrupted = fit(start(plan, own_ray=ray_info.started).tuner, resume_hint(plan.experiment_uri))
        return replace(outcome(plan.experiment_uri, plan.options.metric, plan.options.mode), interrupted=interrupted)


def resume_sweep(path: str, address: str | None = None, dashboard: bool = True,
                 paths: Mapping[str, Any] | None = None, **init_kwargs) -> SweepOutcome:
    """Continue a sweep whose driver died: finished trials stay finished, errored and unfinished ones
    continue from their last checkpoints (``Tuner.restore(resume_errored=True, restart_errored=False)``).

    ``paths`` (``--set data_root=NEW``) moves the sweep to files elsewhere (``tune.driver.plan``); the data
    set is checked before Ray starts either way."""
    uri = absolute(path)
    record = read_record(uri)
    moved.install()  # Tune's pickles of a sweep started before the layout of issue 31 name the old modules
    torn = repair_state(uri)
    if torn:
        log.warning("resume: %s torn (the driver was killed while copying it): resuming from the last whole "
                    "snapshot of the sweep's state", ", ".join(torn))
    if not ray_tune.Tuner.can_restore(uri):
        raise SweepInputError(f"resume needs a sweep folder with Tune's experiment state, but {uri!r} has none "
                              f"(the driver died before Tune saved it): start the sweep again with a new --name")
    options = SweepOptions.from_record(record.options)
    located = relocated(record, paths or {}, RELOCATABLE_KEYS, "resume")
    if not set(PATH_KEYS) & set(record.swept):  # a swept path: checked in its trials
        check_data([{**record.space.base, **located}])
    record_paths(uri, record, located)
    max_epochs = record.max_epochs or train_config(record.space.base).epochs
    mutable = tuple(key for key, spec in record.space.params.items() if isinstance(spec, dict) and spec.get("mutable"))
    rungs = getattr(record, "rungs", None)  # --rungs schedule: placed from the space at the start, read back here
    scheduler = None if options.population_based else build_scheduler(recorded_rungs(options, rungs), max_epochs, {})
    policy = trial_policy(options, scheduler, max_epochs, mutable)
    with ray_session(address, dashboard, **init_kwargs) as ray_info:
        options = resolved_resources(options, ray_info.started)
        tuner = ray_tune.Tuner.restore(uri, trainable=trainable(options, record.experiment, located, policy),
                                   resume_unfinished=True, resume_errored=True, restart_errored=False)
        interrupted = fit(tuner, resume_hint(uri))
        return replace(outcome(uri, record.metric, record.mode), interrupted=interrupted)


def run_configs(configs: Sequence[Mapping[str, Any]], options: SweepOptions, results_dir: str,
                stage: str = "confirm", **init_kwargs) -> SweepOutcome:
    """Run fixed configs (flat dotted dicts; ``None`` = absent) to their full epochs: FIFO, no search, no
    early stopping. Rows go to the existing sweep's ``results_dir`` with ``stage``; Tune's own state goes
    to ``<sweep>/<stage>-<UTC timestamp>``. Bad configs raise ``ValueError`` before Ray starts."""
    if not configs:
        raise SweepInputError("run_configs needs at least one config, but got none")
    for config in configs:
        train_config(config)
        if config_workers(config) != options.workers:  # the same data-parallel run as the sweep's trial
            raise SweepInputError(f"--gpus-per-trial / --workers-per-trial must give the {config_workers(config)} "
                                  f"worker(s) the config ran with (workers={config_workers(config)}), but give "
                                  f"{options.workers}: a config reruns with its own workers")
    sweep_uri = results_dir.rstrip("/").rsplit("/", 1)[0]
    record = read_record(sweep_uri)
    swept = record.swept
    sink = ParquetSink(results_dir, record.experiment or sweep_uri.rsplit("/", 1)[-1], options.metric,
                       options.mode, stage=stage, swept=swept, provenance=provenance(),
                       gpus_per_worker=options.gpus_per_worker)
    name = f"{stage}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    with ray_session(options.address, options.dashboard, **init_kwargs) as ray_info:
        options = resolved_resources(options, ray_info.started)  # the nodes cap multi-worker trials at once
        tune_config = ray_tune.TuneConfig(
            metric=options.metric, mode=options.mode, search_alg=FixedConfigs(configs, options.metric, options.mode),
            scheduler=FIFOScheduler(), num_samples=len(configs), max_concurrent_trials=options.max_concurrent,
            reuse_actors=reuse_actors(options), trial_name_creator=TrialNamer([*swept, "seed"]),
            trial_dirname_creator=trial_dirname)
        best = SweepBest(name, options.metric, options.mode)  # the stage's best, in the trials' lines
        tuner = ray_tune.Tuner(trainable(options, name), tune_config=tune_config,
                           run_config=_run_config(options, name, sweep_uri, [sink, best]))
        interrupted = fit(tuner)  # no resume for these runs: Ray's Tuner.restore advice is dropped
        return replace(outcome(sweep_uri, options.metric, options.mode), interrupted=interrupted)
