"""The Ray Tune trainable: one trial = one ``xbm.Trainer`` run, reported epoch by epoch with a checkpoint, so
Tune can restore a retried or resumed trial at its last epoch (``epoch`` is ASHA's time attribute).

A deterministic error ends the trial with one error row (``tune.trial.base``); any other propagates, and
``FailureConfig(max_failures)`` retries the trial from its last checkpoint. A resumed sweep whose files moved
(``resume --set data_root=NEW``) hands the trial its ``paths``, reported under ``relocated``. Each row carries
where the time went: ``setup_s``, ``checkpoint_s`` and the trainer's ``train_s``, ``data_wait_s``, ``eval_s``.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Mapping

from ray import tune as ray_tune
from ray.tune.trainable.function_trainable import wrap_function

from analysis.location import Folder
from tune.results import live
from tune.trial.base import TrialPolicy, build_trainer, deterministic_failure, error_row, refused_row
from tune.trial.checkpoints import storage_uri
from tune.trial.logs import trial_logging
from xbm.training.best_weights import BestWeights, finish_best_weights
# CHECKPOINT_FILE, SETUP_KEY, BEST_WEIGHTS_KEY: re-exported (the loop that writes them moved to tune.trial.loop)
from tune.trial.loop import BEST_WEIGHTS_KEY, CHECKPOINT_FILE, SETUP_KEY, TrialLoop, tune_reporter  # noqa: F401
from tune.trial.setup import restore_and_prepare, setup_trial

log = logging.getLogger(__name__)


def run_trial(config: Mapping[str, Any], metric: str, mode: str, paths: Mapping[str, Any] | None = None,
              sweep: str | None = None, policy: TrialPolicy = TrialPolicy()) -> None:
    """Train one trial, reporting each epoch (with a checkpoint when ``policy`` says so); resume from
    Tune's checkpoint if any. ``paths`` replace the config's values of those keys (module docstring).

    It logs a header and one line per epoch, which reach the actor's stdout (``tune.results.live``,
    ``tune.trial.logs.trial_logging``); ``sweep`` is the
    experiment name under which the driver publishes the sweep's best so far. The epoch loop is
    ``tune.trial.loop.TrialLoop``, which rank 0 of a data-parallel trial runs too (``tune.trial.data_parallel``)."""
    started = time.perf_counter()
    # torch and the trainer load here, in the trial's process: the driver (CLI, sink) never needs them
    import ray
    import torch

    from tune.trial.resources import cap_gpu_memory, free_previous_trial, track_trainer

    free_previous_trial()
    trial_logging()
    context = ray_tune.get_context()
    trial_id = context.get_trial_id()
    live.log_header(trial_id, context.get_trial_name(), config)
    assigned = ray.get_runtime_context().get_assigned_resources()
    try:   # torch and decode threads: the trial's CPUs, not the node's
        setup = setup_trial(config, paths, assigned.get("CPU", 1))
    except ValueError as exc:   # deterministic: one error row, no retry
        ray_tune.report(refused_row(exc, metric, mode, trial_id))
        return
    cfg, where = setup.cfg, setup.where()
    gpu_share = float(assigned.get("GPU", 0.0))
    if cfg.device.startswith("cuda") and torch.cuda.is_available():
        if torch.device(cfg.device).index is not None:  # the cap and the peak read the current device
            torch.cuda.set_device(torch.device(cfg.device))
        cap_gpu_memory(gpu_share)
        torch.cuda.reset_peak_memory_stats()  # an out-of-memory reason names this trial's peak, not a previous one's
    loop = TrialLoop(trial_id, cfg, metric, mode, policy, sweep, where, trial_best_weights(context.get_storage(), mode),
                     tune_reporter(), started)
    trainer = None
    try:
        trainer = build_trainer(cfg, setup.cpus, policy, setup.node_id, sweep)
        track_trainer(trainer)
        restore_and_prepare(trainer, ray_tune.get_checkpoint(), loop.restore)
        loop.run(trainer)
    except Exception as exc:
        failure = deterministic_failure(exc, cfg, loop.epoch, gpu_share)
        if failure is None:  # retried by FailureConfig(max_failures) from the last checkpoint
            raise
        log.warning("%s trial %s epoch %s/%s failed: %s", live.PREFIX, trial_id, failure[0], cfg.epochs, failure[1])
        # no checkpoint: the last good one stays the trial's last checkpoint
        ray_tune.report(error_row(failure, metric, mode, where, exc))
    finally:
        loop.best.wait()
        if trainer is not None:   # its loader workers end with the trial (free_previous_trial: a stopped one)
            trainer.close()


def trial_best_weights(storage, mode: str) -> BestWeights:
    """The trial's best weights, beside its checkpoints in Tune's trial folder (``storage``: Tune's
    ``StorageContext`` of the trial)."""
    return BestWeights(Folder(storage.trial_fs_path, filesystem=storage.storage_filesystem),
                       storage_uri(storage.storage_filesystem, storage.trial_fs_path), mode)


def make_trainable(metric: str, mode: str, resources: Mapping[str, float] | None = None,
                   paths: Mapping[str, Any] | None = None, sweep: str | None = None,
                   policy: TrialPolicy = TrialPolicy(), workers: int = 1,
                   per_worker: Mapping[str, float] | None = None) -> type:
    """The Tune trainable class for a sweep ``sweep`` optimising ``metric`` in ``mode``.

    A function trainable (``run_trial``) wrapped by Ray, subclassed to name its actors and their logs:
    ``repr`` is ``XbmTrial(<trial name>)`` of the trial the actor runs now (the name carries the trial
    id and its variant, see ``TrialNamer``). Ray records the repr once, when the actor starts, for the
    dashboard's Actors table and the log prefix; with ``reuse_actors=True`` the Actors table keeps
    naming the first trial of that actor, while ``reset_config`` re-announces the name so the log
    prefix follows the new trial (``tune.results.live.announce_actor_name``). ``resources`` (e.g.
    ``{"cpu": 1, "gpu": 0.5}``) is each trial's request; set on the function before Ray wraps it, so the
    class keeps its name (``ray_tune.with_resources`` on the class would rename it ``ResourceTrainable``).
    ``paths`` and ``policy`` go to ``run_trial``. With ``workers`` > 1 each trial is the launcher of a Ray
    Train run of that many workers of ``per_worker`` resources (``tune.trial.data_parallel``), and ``resources``
    the launcher's own request.
    """
    paths = dict(paths or {})

    def xbm_trial(config):
        if workers > 1:
            from tune.trial.data_parallel import run_parallel_trial

            return run_parallel_trial(config, metric, mode, paths, sweep, policy, workers, dict(per_worker or {}))
        return run_trial(config, metric, mode, paths, sweep, policy)

    if resources is not None:
        xbm_trial = ray_tune.with_resources(xbm_trial, dict(resources))
    base = wrap_function(xbm_trial, name="xbm_trial")

    def __repr__(self) -> str:
        return f"XbmTrial({getattr(self, 'trial_name', '')})"

    def reset_config(self, new_config) -> bool:
        finish_best_weights()  # the previous trial's
        ok = base.reset_config(self, new_config)
        if ok:  # Tune set the new trial's info before this call
            live.announce_actor_name(repr(self))
        return ok

    def cleanup(self) -> None:
        if workers > 1:  # a stopped data-parallel trial: its Train run ends before the launcher does
            from tune.trial.data_parallel import abort_running

            abort_running()
        finish_best_weights()
        base.cleanup(self)

    return type("XbmTrial", (base,), {"__repr__": __repr__, "reset_config": reset_config, "cleanup": cleanup,
                                      "__module__": __name__})


class TrialNamer:
    """Readable trial names, ``<trial_id>_<variant>``, e.g. ``a1b2c_00004_kind=pcxbn,lambda_mu=0.31``.

    The variant lists the swept parameters (last part of the dotted name, values to 3 significant
    digits), so the progress table, the trial folders and the Actors view say which config runs.
    """

    def __init__(self, swept: list[str], limit: int = 80) -> None:
        self.swept = list(swept)
        self.limit = limit

    def variant(self, config: Mapping[str, Any]) -> str:
        parts = []
        for key in self.swept:
            value = config.get(key)
            if value is None:
                continue
            text = f"{value:.3g}" if isinstance(value, float) else str(value)
            parts.append(f"{key.rsplit('.', 1)[-1]}={text}")
        return ",".join(parts)

    def __call__(self, trial) -> str:
        name = f"{trial.trial_id}_{self.variant(trial.config)}".rstrip("_")
        return name[: self.limit]


def trial_dirname(trial) -> str:
    """Short trial folders (Tune's default appends every constant of the config to the name)."""
    return f"trial_{trial.trial_id}"
