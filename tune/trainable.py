"""The Ray Tune trainable: one trial = one ``xbm.Trainer`` run, reported epoch by epoch.

Ray hands the trainable a plain dict; it becomes a ``TrainConfig`` once, here at the edge (STYLE 7).
Per epoch the trainer's flat metrics dict goes to ``ray_tune.report`` with a checkpoint holding
``trainer.state_dict()``, so Tune can restore a retried or resumed trial at its last epoch and the
epochs stay continuous (``epoch`` is ASHA's time attribute). Only the current ``ray.tune`` API is used
(``ray.train.report`` fails inside Tune in Ray 2.60).

A non-finite loss (``xbm.errors.NonFiniteLossError``), a CUDA out-of-memory error, a bad image under
``on_bad_image=stop`` (``xbm.errors.BadImageError``) and loader workers too many for ``/dev/shm``
(``xbm.errors.SharedMemoryError``) are deterministic, so retrying them would only burn
``max_failures``: the trial reports one last result carrying ``error`` and
``stop_reason`` (and the worst value of the sweep metric, so schedulers rank it last) and returns. The Parquet sink records it as ``failed`` with
the reason, the searcher tells Optuna ``FAIL``, and the sweep goes on. Other exceptions propagate, so
``FailureConfig(max_failures)`` retries the trial from its last checkpoint.

Checkpoints follow ``tune.checkpoints``: a full one every ``TrialPolicy.checkpoint_period_s`` seconds of
epochs and at the last epoch, the best epoch's weights whenever the metric improves. An epoch that
``eval_every`` does not evaluate reports the sweep metric as NaN (Tune wants the key in every result;
schedulers decide only at rung epochs, which ``TrialPolicy.evaluate_at`` always evaluates).

Set-up shared between trials: the references and the warm-up are computed once per node for identical
inputs and read back by the sweep's later trials (``xbm.training.reuse``, a folder per sweep under the
node's temp dir), bit-identical to computing them again.

Where a trial's time goes: every row carries ``setup_s`` (building the trainer, restoring a checkpoint,
references and warm-up: everything before the first epoch of this run of the trial, plus the set-up
recorded in the checkpoint it resumed from), ``checkpoint_s``
(best weights and full checkpoints written since the previous row) and the trainer's ``train_s``,
``data_wait_s``, ``eval_s``.

Files: a resumed sweep whose files moved (``resume --set data_root=NEW``) hands the trainable its
recorded ``paths``; they replace the trial's own values, and every report carries them under
``relocated`` so the sink records where the trial read its data. A data set or ``pretrained_path``
missing on the trial's node raises :class:`MissingOnNodeError` naming the node: on a cluster the
driver's check (``tune.plan.check_data``) only proves the files exist on the driver's machine.
"""
from __future__ import annotations

import math
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from ray import tune as ray_tune
from ray.tune.trainable.function_trainable import wrap_function

from tune import live
from tune.checkpoints import DEFAULT_PERIOD_S, BestWeights, finish_best_weights, storage_uri
from tune.parquet import Storage
# CHECKPOINT_FILE, SETUP_KEY, BEST_WEIGHTS_KEY: re-exported (the loop that writes them moved to tune.trial_loop)
from tune.trial_loop import BEST_WEIGHTS_KEY, CHECKPOINT_FILE, SETUP_KEY, TrialLoop, tune_reporter  # noqa: F401

#: result keys that mark the final report of a trial ended by a deterministic error, and why it stopped
ERROR_KEY, STOP_REASON_KEY = "error", "stop_reason"
#: trial-level facts reported with every epoch (strings; the sink puts them in trials.parquet too)
NODE_KEY, GPU_KEY = "node_id", "gpu_ids"
NOSET_VISIBLE_DEVICES = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"
#: result key: {path key: value} a trial read instead of its config's (a sweep moved on resume)
RELOCATED_KEY = "relocated"


class MissingOnNodeError(FileNotFoundError):
    """A trial's data set or ``pretrained_path`` is missing on the node the trial runs on. The message
    is the underlying error's, then a last line naming the node and the path (the line trials.parquet's
    ``error`` column keeps)."""


def train_config(config: Mapping[str, Any]):
    """Ray's (flat, dotted) config dict -> ``TrainConfig``.

    Keys whose value is ``None`` are conditional parameters absent from this trial (their ``when`` did
    not hold): they are dropped, so the trainer uses the field's default, and the sink writes null.
    NumPy scalars (Ray's samplers, configs read back from Parquet) become Python values.
    """
    # imported here: xbm.config pulls in torch (through xbm.normalisers), which a trial process should
    # load inside the trial, where its cost belongs, not while Ray builds the actor
    from xbm.config import TrainConfig

    return TrainConfig.from_dict({k: v.item() if isinstance(v, np.generic) else v
                                  for k, v in config.items() if v is not None})


def assigned_device(requested: str, gpu_ids: list) -> str:
    """The device this trial may use: the GPU Ray assigned (Ray sets CUDA_VISIBLE_DEVICES, so it is
    ``cuda`` inside the process), else CPU. ``auto`` must not grab a GPU Ray did not assign, which
    the trainer's own ``auto`` would do on a shared GPU machine. Under Ray's
    ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES`` the process sees the node's GPUs, and plain ``cuda``
    would put every trial on the first: the assigned one is named (its place among CUDA_VISIBLE_DEVICES)."""
    import torch

    if requested != "auto":
        return requested
    if not (gpu_ids and torch.cuda.is_available()):
        return "cpu"
    if os.environ.get(NOSET_VISIBLE_DEVICES, "").lower() not in ("1", "true"):  # Ray's own test of it
        return "cuda"
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    gpu = str(gpu_ids[0])
    return f"cuda:{visible.index(gpu) if gpu in visible else int(gpu)}"


@dataclass(frozen=True)
class TrialPolicy:
    """How a sweep runs each of its trials, beyond the trial's config: the full-checkpoint period (seconds
    of epochs; 0 = every epoch), the epochs evaluated whatever ``eval_every`` says (the scheduler's rungs),
    and for population-based training the checkpoint interval in epochs and the mutable keys."""

    checkpoint_period_s: float = DEFAULT_PERIOD_S
    evaluate_at: tuple[int, ...] = ()
    checkpoint_every: int = 0  # also a full checkpoint every this many epochs (PBT: its interval; 0: none)
    mutable: tuple[str, ...] = ()  # keys a restore may change (PBT's explore: ``Trainer.load_state_dict``)


def worst_value(mode: str) -> float:
    """The value a scheduler ranks last: -inf when maximising, +inf when minimising."""
    return -math.inf if mode == "max" else math.inf


def run_trial(config: Mapping[str, Any], metric: str, mode: str, paths: Mapping[str, Any] | None = None,
              sweep: str | None = None, policy: TrialPolicy = TrialPolicy()) -> None:
    """Train one trial, reporting each epoch (with a checkpoint when ``policy`` says so); resume from
    Tune's checkpoint if any. ``paths`` replace the config's values of those keys (module docstring).

    It prints a header and one line per epoch to the actor's stdout (``tune.live``); ``sweep`` is the
    experiment name under which the driver publishes the sweep's best so far. The epoch loop is
    ``tune.trial_loop.TrialLoop``, which rank 0 of a data-parallel trial runs too (``tune.data_parallel``)."""
    started = time.perf_counter()
    # torch and the trainer load here, in the trial's process: the driver (CLI, sink) never needs them
    import ray
    import torch

    from tune.resources import cap_gpu_memory, free_previous_trial, track_trainer
    from xbm.cpus import use_cpus
    from xbm.training.rng import seed_everything

    free_previous_trial()
    context = ray_tune.get_context()
    trial_id = context.get_trial_id()
    live.print_header(trial_id, context.get_trial_name(), config)
    moved = {k: v for k, v in (paths or {}).items() if config.get(k) != v}
    cfg = train_config({**config, **moved})
    gpu_ids = [str(g) for g in ray.get_gpu_ids()]
    cfg = cfg.replace(device=assigned_device(cfg.device, gpu_ids))
    seed_everything(cfg.seed)
    node_id = ray.get_runtime_context().get_node_id()
    where = {NODE_KEY: node_id, GPU_KEY: ",".join(gpu_ids) or None, **({RELOCATED_KEY: moved} if moved else {})}

    assigned = ray.get_runtime_context().get_assigned_resources()
    cpus = use_cpus(assigned.get("CPU", 1))  # torch and decode threads: the trial's CPUs, not the node's
    gpu_share = float(assigned.get("GPU", 0.0))
    if cfg.device.startswith("cuda") and torch.cuda.is_available():
        if torch.device(cfg.device).index is not None:  # the cap and the peak read the current device
            torch.cuda.set_device(torch.device(cfg.device))
        cap_gpu_memory(gpu_share)
        torch.cuda.reset_peak_memory_stats()  # an out-of-memory reason names this trial's peak, not a previous one's
    loop = TrialLoop(trial_id, cfg, metric, mode, policy, sweep, where, trial_best_weights(context.get_storage(), mode),
                     tune_reporter(), started)
    try:
        trainer = _trainer(cfg, cpus, policy, node_id, sweep)
        track_trainer(trainer)
        checkpoint = ray_tune.get_checkpoint()
        if checkpoint is not None:
            with checkpoint.as_directory() as folder:
                loop.restore(trainer, folder)
        trainer.prepare()
        loop.run(trainer)
    except Exception as exc:
        failure = deterministic_failure(exc, cfg, loop.epoch, gpu_share)
        if failure is None:  # retried by FailureConfig(max_failures) from the last checkpoint
            raise
        print(f"{live.PREFIX} trial {trial_id} epoch {failure[0]}/{cfg.epochs} failed: {failure[1]}", flush=True)
        # no checkpoint: the last good one stays the trial's last checkpoint
        ray_tune.report(error_row(failure, metric, mode, where, exc))
    finally:
        loop.best.wait()


def trial_best_weights(storage, mode: str) -> BestWeights:
    """The trial's best weights, beside its checkpoints in Tune's trial folder (``storage``: Tune's
    ``StorageContext`` of the trial)."""
    return BestWeights(Storage(storage.trial_fs_path, filesystem=storage.storage_filesystem),
                       storage_uri(storage.storage_filesystem, storage.trial_fs_path), mode)


def deterministic_failure(exc: BaseException, cfg, epoch: int, gpu_share: float) -> tuple[int, str] | None:
    """``(epoch, reason)`` for an error that every retry would meet again (module docstring): a non-finite
    loss, a CUDA out-of-memory error, a bad image under ``on_bad_image=stop``, loader workers too many for
    ``/dev/shm``; None for any other.
    ``epoch`` is the last epoch reported."""
    import torch

    from tune.resources import RankOutOfMemoryError, out_of_memory_reason
    from xbm.errors import BadImageError, NonFiniteLossError, SharedMemoryError

    if isinstance(exc, NonFiniteLossError):
        return max(exc.epoch, epoch), "non-finite loss"
    if isinstance(exc, RankOutOfMemoryError):  # measured on the rank (tune.data_parallel)
        return epoch + 1, exc.reason
    if isinstance(exc, torch.OutOfMemoryError):
        return epoch + 1, out_of_memory_reason(cfg.batch_size, gpu_share or 1.0)
    if isinstance(exc, BadImageError):  # on_bad_image=stop: every retry would stop on the same file
        return epoch + 1, "bad image (on_bad_image=stop)"
    if isinstance(exc, SharedMemoryError):  # /dev/shm's size, not its use: a retry cannot fit either
        return epoch + 1, "shared memory too small for the loader workers (/dev/shm; see error)"
    return None


def error_row(failure: tuple[int, str], metric: str, mode: str, where: Mapping[str, Any],
              exc: BaseException) -> dict[str, Any]:
    """The last result of a trial ended by a deterministic error: not retried, ranked last."""
    return {"epoch": failure[0], metric: worst_value(mode), **where, ERROR_KEY: f"{type(exc).__name__}: {exc}",
            STOP_REASON_KEY: failure[1]}


def _trainer(cfg, cpus: int, policy: TrialPolicy, node_id: str, sweep: str | None, ranks=None):
    """The trial's Trainer, reusing the references and warm-up that an earlier trial of the sweep computed
    on this node for the same inputs (``xbm.training.reuse``); files missing on this node raise
    :class:`MissingOnNodeError` naming it. ``ranks`` (``xbm.distributed.Ranks``): this process's place in a
    data-parallel trial (``tune.data_parallel``); None for a one-worker trial."""
    from ray.util import get_node_ip_address

    from xbm.trainer import Trainer
    from xbm.training.reuse import default_folder

    try:
        # num_workers=auto: the CPUs Ray gave this trial (--cpus-per-trial) minus one
        distributed = {} if ranks is None else {"ranks": ranks}
        return Trainer(cfg, cpus=cpus, evaluate_at=policy.evaluate_at, reuse_dir=default_folder(sweep or "default"),
                       **distributed)
    except FileNotFoundError as exc:  # DatasetNotFoundError, or a missing pretrained_path file
        missing = getattr(exc, "filename", None) or cfg.pretrained_path
        raise MissingOnNodeError(
            f"{exc}\nmissing on node {socket.gethostname()} ({get_node_ip_address()}, Ray node "
            f"{node_id[:12]}): {missing}. Every node that runs trials needs the files at this path (a "
            f"shared file system, or a copy on each node); the driver's check only saw its own") from exc


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
    prefix follows the new trial (``tune.live.announce_actor_name``). ``resources`` (e.g.
    ``{"cpu": 1, "gpu": 0.5}``) is each trial's request; set on the function before Ray wraps it, so the
    class keeps its name (``ray_tune.with_resources`` on the class would rename it ``ResourceTrainable``).
    ``paths`` and ``policy`` go to ``run_trial``. With ``workers`` > 1 each trial is the launcher of a Ray
    Train run of that many workers of ``per_worker`` resources (``tune.data_parallel``), and ``resources``
    the launcher's own request.
    """
    paths = dict(paths or {})

    def xbm_trial(config):
        if workers > 1:
            from tune.data_parallel import run_parallel_trial

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
            from tune.data_parallel import abort_running

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
