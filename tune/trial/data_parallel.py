"""A trial that is a data-parallel run of N workers on Ray Train (``--workers-per-trial N``).

Ray's Train-in-Tune pattern (Ray 2.60, Train V2): the Tune trial is a small launcher function
(:func:`run_parallel_trial`) that starts a ``TorchTrainer`` of N workers (gloo on the CPU, NCCL on GPUs)
and waits for it. ``xbm-tune train --workers N`` starts the same workers on a local Ray (:func:`train_run`),
rank 0 writing the run's folder (:func:`train_rank`). Each worker (:func:`worker_main`, set up by
``tune.trial.setup``) builds ``xbm.Trainer`` inside the process group Ray Train initialised
(``Ranks.from_process_group()``: the trainer shards the global batch, keeps the memories identical, wraps DDP and
evaluates on rank 0).

- **Reports.** Rank 0 runs the one-worker trial's epoch loop (``tune.trial.loop.TrialLoop``: live line,
  best weights, checkpoint clock, cost columns) with ``ray.train.report`` as its reporter; the other ranks
  report an empty result per epoch, as Train wants from every rank. :class:`ForwardToTune`, a Train
  callback in Train's controller, passes rank 0's result and the checkpoint Train persisted to the launcher,
  which hands them to ``ray_tune.report``: Tune copies the checkpoint into the trial's folder, so schedulers,
  the Parquet sink, ``resume`` and PBT see one trial with Tune checkpoints, as for one worker. (Ray's
  ``TuneReportCallback`` forwards the metrics only, not the checkpoint.)
- **Resume.** The launcher passes Tune's checkpoint (``ray_tune.get_checkpoint()``) to every worker, which
  loads it (``Trainer.load_state_dict``): a retried, resumed or exploited trial continues from Tune's
  checkpoint, never from Train's own (each launch is a new Train run, named ``<trial>-<random>``, under the
  trial's folder in ``TRAIN_RUNS``, deleted when the run ends).
- **Failures.** Train does not retry (``FailureConfig(max_failures=0)``): a worker's error ends the run,
  the launcher re-raises it and Tune's ``FailureConfig`` retries the trial from its last checkpoint, unless
  the error is deterministic (``tune.trial.base.deterministic_failure``), which ends the trial as failed.
- **Stopping.** When Tune stops a trial (the scheduler, a budget), the trainable's ``cleanup`` aborts its
  Train run (:func:`abort_running`: the controller shuts its workers down and removes their placement group)
  before the launcher actor ends; Train's own clean-up of an orphaned run relies on the state API, which
  fails where several Ray instances share a machine, and a leaked placement group holds its workers'
  resources for the rest of the sweep. Multi-worker sweeps do not reuse actors (``tune.driver.sweep``).
"""
from __future__ import annotations

import logging
import sys
import threading
import time
import uuid
from typing import Any, Mapping

from ray import tune as ray_tune
from ray.train.v2.api.callback import UserCallback

from tune.results import live
from tune.results.keys import GPU_KEY, NODE_KEY, RELOCATED_KEY
from tune.results.trial_config import train_config
from tune.trial.base import TrialPolicy, build_trainer, deterministic_failure, error_row, refused_row
from tune.trial.logs import trial_logging
from tune.trial.loop import Reporter, TrialLoop, follow, load_trainer_state
from tune.trial.setup import restore_and_prepare, setup_trial

#: the folder of a trial's Train runs, inside its Tune trial folder
TRAIN_RUNS = "data_parallel"
#: this launcher process's running Train controller (an actor handle), for :func:`abort_running`
_RUNNING: dict[str, Any] = {}
#: the first report of every rank, before any work: it brings the controller's handle to the launcher, so a
#: trial stopped during its set-up (decode, references, warm-up) is aborted too; never forwarded to Tune
STARTED_KEY = "xbm_started"

log = logging.getLogger(__name__)


class ForwardToTune(UserCallback):
    """In Train's controller: each report's rank-0 result and persisted checkpoint, onto ``queue`` (a Ray
    queue the launcher reads)."""

    def __init__(self, queue) -> None:
        self.queue = queue

    def after_report(self, run_context, metrics, checkpoint) -> None:
        import ray

        # this controller's own handle goes along, so the launcher can abort the run (abort_running)
        self.queue.put((dict(metrics[0]), checkpoint, ray.get_runtime_context().current_actor))


def abort_running(timeout_s: float = 60.0) -> None:
    """Abort this launcher's running Train run, if any (Tune is stopping the trial): its workers end, their
    placement group is removed, and the run's folder (Train's copies of the checkpoints) is deleted."""
    import ray

    controller, runs = _RUNNING.pop("controller", None), _RUNNING.pop("runs", None)
    if controller is not None:
        try:
            ray.get(controller.abort.remote(), timeout=timeout_s)
        except Exception:  # the controller exits inside abort (exit_actor), or was already gone
            pass
    if runs is not None:
        _delete(*runs)


def run_parallel_trial(config: Mapping[str, Any], metric: str, mode: str, paths: Mapping[str, Any] | None,
                       sweep: str | None, policy: TrialPolicy, workers: int,
                       per_worker: Mapping[str, float]) -> None:
    """The Tune function of a trial of ``workers`` Train workers of ``per_worker`` resources each."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.util.queue import Empty, Queue

    trial_logging()
    context = ray_tune.get_context()
    trial_id = context.get_trial_id()
    live.log_header(trial_id, context.get_trial_name(), config)
    try:
        train_config(config)   # refused before any worker starts: one error row, no retry
    except ValueError as exc:
        ray_tune.report(refused_row(exc, metric, mode, trial_id))
        return
    storage = context.get_storage()
    runs = f"{storage.trial_fs_path}/{TRAIN_RUNS}"
    _delete(storage.storage_filesystem, runs)  # an earlier launch's runs: Tune's checkpoint is the one to resume
    _RUNNING["runs"] = (storage.storage_filesystem, runs)
    gpus = float(per_worker.get("GPU", 0.0))
    queue = Queue(actor_options={"num_cpus": 0})
    job = {"config": dict(config), "metric": metric, "mode": mode, "paths": dict(paths or {}), "sweep": sweep,
           "policy": policy, "trial_id": trial_id, "trial_path": storage.trial_fs_path,
           "filesystem": storage.storage_filesystem, "checkpoint": ray_tune.get_checkpoint(),
           "cpus": float(per_worker.get("CPU", 1.0)), "started_s": time.time()}
    trainer = TorchTrainer(
        worker_main, train_loop_config=job, torch_config=TorchConfig(backend="nccl" if gpus > 0 else "gloo"),
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=gpus > 0, resources_per_worker=dict(per_worker)),
        run_config=RunConfig(name=f"{trial_id}-{uuid.uuid4().hex[:8]}", storage_path=runs,
                             storage_filesystem=storage.storage_filesystem,
                             failure_config=FailureConfig(max_failures=0),
                             checkpoint_config=CheckpointConfig(num_to_keep=None), callbacks=[ForwardToTune(queue)]))
    ended: dict[str, BaseException] = {}
    fitting = threading.Thread(target=_fit, args=(trainer, ended), daemon=True, name="train-run")
    fitting.start()
    last: dict[str, Any] = {}
    while True:
        try:
            row, checkpoint, _RUNNING["controller"] = queue.get(timeout=0.5)
        except Empty:
            if fitting.is_alive() or not queue.empty():
                continue
            break
        if STARTED_KEY in row:
            continue
        last = row
        ray_tune.report(row, checkpoint=None if checkpoint is None else
                    ray_tune.Checkpoint(checkpoint.path, filesystem=checkpoint.filesystem))
    _RUNNING.pop("controller", None)
    _RUNNING.pop("runs", None)
    _delete(storage.storage_filesystem, runs)
    if "error" in ended:
        _fail(ended["error"], config, metric, mode, last, gpus, trial_id)


def _fit(trainer, ended: dict) -> None:
    try:
        trainer.fit()
    except BaseException as exc:  # re-raised (or reported) by the launcher's thread
        ended["error"] = exc


def _fail(error: BaseException, config, metric: str, mode: str, last: Mapping[str, Any], gpus: float,
          trial_id: str) -> None:
    """A Train run that failed: a deterministic worker error ends the trial as failed (its error row);
    any other is raised, so Tune retries the trial from its last checkpoint."""
    cfg = train_config(config)
    epoch = int(last.get("epoch", 0))
    for rank, cause in worker_errors(error).items():
        failure = deterministic_failure(cause, cfg, epoch, gpus)
        if failure is not None:
            log.warning("%s trial %s epoch %s/%s failed on rank %s: %s", live.PREFIX, trial_id, failure[0],
                        cfg.epochs, rank, failure[1])
            where = {k: last[k] for k in (NODE_KEY, GPU_KEY, RELOCATED_KEY) if k in last}
            ray_tune.report(error_row(failure, metric, mode, where, cause))
            return
    raise error


def worker_errors(error: BaseException) -> dict[int, BaseException]:
    """The workers' own exceptions in a Ray Train failure, by rank (Train wraps each with its traceback);
    empty for any other error."""
    failures = getattr(error, "worker_failures", None) or {}
    return {rank: getattr(failures[rank], "_base_exc", failures[rank]) for rank in sorted(failures)}


def _delete(fs, path: str) -> None:
    import pyarrow.fs as pafs

    if fs.get_file_info(path).type == pafs.FileType.Directory:
        fs.delete_dir(path)


def worker_main(job: Mapping[str, Any]) -> None:
    """One Train worker, of a sweep's data-parallel trial (rank 0 runs the trial's epoch loop and reports; the
    others follow) or of ``xbm-tune train --workers N`` (``job["folder"]``: :func:`train_rank`). A trial's rank that
    runs out of CUDA memory says so with its own peak (``RankOutOfMemoryError``)."""
    import torch

    from tune.trial.resources import RankOutOfMemoryError, out_of_memory_reason

    if "folder" in job:
        train_rank(job)
        return
    try:
        _run_rank(job)
    except torch.OutOfMemoryError as exc:
        reason = out_of_memory_reason(train_config(job["config"]).batch_size, 1.0)
        raise RankOutOfMemoryError(reason, str(exc)) from exc


def _run_rank(job: Mapping[str, Any]) -> None:
    started = time.perf_counter() - (time.time() - job["started_s"])  # setup_s from the launcher's start
    import ray
    import ray.train
    import torch.distributed as dist

    from analysis.location import Folder
    from tune.trial.checkpoints import storage_uri
    from xbm.training.best_weights import BestWeights

    ray.train.report({STARTED_KEY: 1})  # every rank: Train's reports are collective
    trial_logging()   # rank 0's epoch lines reach this worker's stdout (the dashboard's and the driver's logs)
    rank = ray.train.get_context().get_world_rank()
    setup = setup_trial(job["config"], job["paths"], job["cpus"], rank_device=True)
    every_gpu: list = [None] * dist.get_world_size()
    dist.all_gather_object(every_gpu, setup.gpu_ids)  # the trial's GPUs, for gpu_ids
    where, cfg = setup.where([g for ids in every_gpu for g in ids]), setup.cfg
    trainer = _trainer(cfg, setup.cpus, job["policy"], setup.node_id, job["sweep"])
    reporter = Reporter(ray.train.report, ray.train.Checkpoint.from_directory)
    try:
        if rank != 0:
            restore_and_prepare(trainer, job["checkpoint"],
                                lambda trainer, folder: load_trainer_state(trainer, folder, job["policy"].mutable))
            follow(trainer, reporter)
            return
        fs, path = job["filesystem"], job["trial_path"]
        best = BestWeights(Folder(path, filesystem=fs), storage_uri(fs, path), job["mode"])
        loop = TrialLoop(job["trial_id"], cfg, job["metric"], job["mode"], job["policy"], job["sweep"], where, best,
                         reporter, started, best_before_report=True)
        try:
            restore_and_prepare(trainer, job["checkpoint"], loop.restore)
            loop.run(trainer)
        finally:
            best.wait()
    finally:   # before Train destroys the process group: DDP lets go of it (DataParallel.close)
        trainer.close()


def _trainer(cfg, cpus: int, policy: TrialPolicy, node_id: str, sweep: str | None):
    """``tune.trial.base.build_trainer`` (reuse, files missing on the node named) with the rank's place in the
    process group Ray Train initialised."""
    from xbm.training.distributed import Ranks

    return build_trainer(cfg, cpus, policy, node_id, sweep, ranks=Ranks.from_process_group())


def train_run(cfg, folder, workers: int, gpus: bool, progress: bool = False) -> None:
    """``xbm-tune train --workers N``: the run ``cfg`` as ``workers`` Train workers (gloo on the CPU; NCCL with one
    GPU each when ``gpus``) on a local Ray sized for them, rank 0 writing ``folder`` (:func:`train_rank`). A worker's
    error is raised as its own exception (Train's wrapper dropped)."""
    import os

    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from xbm.runtime.cpus import available_cpus

    cpus = max(1, available_cpus() // workers)
    # a local Ray sized for the workers (more logical CPUs than cores is allowed: they are shares, not pins)
    ray.init(address="local", num_cpus=max(available_cpus(), workers * cpus), include_dashboard=False)
    try:
        trainer = TorchTrainer(
            # absolute: a worker's working folder is Ray's, not the user's
            worker_main, train_loop_config={"config": cfg.to_dict(), "folder": os.path.abspath(folder), "cpus": cpus,
                                            "progress": progress},
            torch_config=TorchConfig(backend="nccl" if gpus else "gloo"),
            scaling_config=ScalingConfig(num_workers=workers, use_gpu=gpus, resources_per_worker={"CPU": cpus}),
            run_config=RunConfig(name="ray_train", storage_path=os.path.abspath(folder),
                                 failure_config=FailureConfig(max_failures=0)))
        trainer.fit()
    except Exception as exc:  # a worker's error, with its traceback
        cause = next(iter(worker_errors(exc).values()), exc)
        if cause is exc:
            raise
        raise cause from exc
    finally:
        ray.shutdown()


def train_rank(job: Mapping[str, Any]) -> None:
    """One worker of ``xbm-tune train --workers N``: rank 0 writes the run's folder as ``xbm-tune train`` does (config,
    metrics, checkpoint, best weights, the epoch lines); the others train in step."""
    from pathlib import Path

    from xbm import train_cli
    from xbm.evaluate.signals import collapse_warning
    from xbm.trainer import Trainer
    from xbm.training.distributed import Ranks

    setup = setup_trial(job["config"], None, job["cpus"], rank_device=True)
    cfg, ranks = setup.cfg, Ranks.from_process_group()
    trainer = Trainer(cfg, cpus=setup.cpus, ranks=ranks, **rank_bars(job.get("progress", False), ranks.is_main))
    writer = None
    try:
        if not ranks.is_main:
            for _ in trainer.fit():
                pass
            return
        folder = Path(job["folder"])
        writer = train_cli.RunWriter(folder, cfg.to_dict())
        print(f"output: {folder}", flush=True)
        for metrics in trainer.fit():
            writer.metrics(metrics)
            writer.checkpoint(trainer.state_dict())
            writer.offer_best(trainer, metrics)
            print(train_cli.format_line(metrics, cfg.epochs), flush=True)
            warning = collapse_warning(metrics)
            if warning:
                print(warning, file=sys.stderr, flush=True)
    finally:
        trainer.close()   # before Train destroys the process group: DDP lets go of it (DataParallel.close)
        if writer is not None:
            writer.wait()   # checkpoint.pt and best_weights.pt land before the worker ends


def rank_bars(draw: bool, is_main: bool) -> dict:
    """The ``Trainer``'s bar arguments on a rank of ``xbm-tune train --workers N``: the one-worker run's bars
    (``xbm.train_cli.progress_bars``) on rank 0 when the driver draws them, through Ray
    (``tune.trial.ray_progress.ray_bars``); none on the other ranks, which train in step (one bar per run, not N)."""
    if not (draw and is_main):
        return {}
    from tune.trial.ray_progress import ray_bars
    from xbm.runtime.progress import DELAY_S

    return {"progress": ray_bars(), "eval_progress": ray_bars(DELAY_S)}
