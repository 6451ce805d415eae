"""``xbm-tune train --workers N``: one training run as a data-parallel run of N Ray Train workers on a local
Ray, writing the same output folder as ``xbm-tune train`` (``xbm.train_cli``).

The command's flags and its one-worker body stay in ``xbm.train_cli`` (no Ray in ``xbm``); this module adds
``--workers`` and, for N > 1, starts a local Ray and a ``TorchTrainer`` (gloo on the CPU; NCCL with one GPU
per worker when the machine has N GPUs). Rank 0 writes ``config.yaml``, ``metrics.jsonl`` / ``metrics.csv``,
``checkpoint.pt`` and ``best_weights.pt`` as the one-worker run does; the other ranks train in step. Rank 0 shows
the one-worker run's progress bars, drawn on this terminal through Ray (``tune.ray_progress``), unless
``--no-progress`` or stderr is not a terminal.
Bad input (``--workers 0``, a global batch that does not split into whole classes per rank, fewer GPUs than
workers on a GPU machine, an occupied output folder) exits 2 before Ray starts.
"""
from __future__ import annotations

import argparse
import sys

from tune.ray_progress import driver_draws_bars
from xbm import train_cli


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("One training run, without Ray (--workers N: N data-parallel workers on a local Ray).\n"
                          "The config comes from --config FILE.yaml and --set KEY=VALUE; the output folder\n"
                          "receives config.yaml, metrics.jsonl and metrics.csv, checkpoint.pt and best_weights.pt.")
    train_cli.add_arguments(parser)
    group = parser.add_argument_group("data parallel")
    group.add_argument("--workers", type=int, default=1, metavar="N",
                       help="train as N data-parallel workers on a local Ray (gloo on CPUs; 1 GPU each when the "
                            "machine has N GPUs); batch_size stays the global batch (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    """``xbm.train_cli.run`` for one worker; otherwise the run on Ray Train (0 done, 2 bad input, 1 failure)."""
    workers = getattr(args, "workers", 1)
    if workers == 1:
        return train_cli.run(args)
    try:
        cfg, folder, gpus = _checked(args, workers)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return _fit(cfg, folder, workers, gpus, driver_draws_bars(getattr(args, "progress", True)))


def rank_bars(draw: bool, is_main: bool) -> dict:
    """The ``Trainer``'s bar arguments on a rank: the one-worker run's bars (``xbm.train_cli.progress_bars``) on
    rank 0 when the driver draws them, through Ray (``tune.ray_progress.ray_bars``); none on the other ranks,
    which train in step (one bar per run, not N)."""
    if not (draw and is_main):
        return {}
    from tune.ray_progress import ray_bars
    from xbm.progress import DELAY_S

    return {"progress": ray_bars(), "eval_progress": ray_bars(DELAY_S)}


def _checked(args: argparse.Namespace, workers: int):
    """The run's TrainConfig (with ``workers``), its output folder and whether it uses GPUs; ValueError
    naming the flag and the rule on bad input (nothing started)."""
    import torch

    from tune.options import SweepInputError
    from tune.workers import check_batch_split

    if workers < 1:
        raise SweepInputError(f"--workers must be >= 1 (data-parallel workers of the run), but got {workers}")
    cfg = train_cli.resolve_config(args)
    check_batch_split([cfg.batch_size], [cfg.samples_per_class], [cfg.objective], workers, "--workers",
                      [cfg.neighbours.k], [cfg.moco.bn_splits], [cfg.sampler])
    cfg = cfg.replace(workers=workers)
    folder = train_cli.output_folder(args.output)
    have = torch.cuda.device_count() if cfg.device != "cpu" else 0
    if 0 < have < workers:
        raise SweepInputError(f"--workers {workers} needs one GPU per worker, but this machine has {have}; use "
                              f"--workers {have}, or --set device=cpu")
    return cfg, folder, have >= workers


def _fit(cfg, folder, workers: int, gpus: bool, progress: bool = False) -> int:
    import os

    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from tune.trial.data_parallel import worker_errors
    from xbm.cpus import available_cpus

    cpus = max(1, available_cpus() // workers)
    # a local Ray sized for the workers (more logical CPUs than cores is allowed: they are shares, not pins)
    ray.init(address="local", num_cpus=max(available_cpus(), workers * cpus), include_dashboard=False)
    try:
        trainer = TorchTrainer(
            # absolute: a worker's working folder is Ray's, not the user's
            worker_main, train_loop_config={"config": cfg.to_dict(), "folder": os.path.abspath(folder), "cpus": cpus,
                                            "gpus": gpus, "progress": progress},
            torch_config=TorchConfig(backend="nccl" if gpus else "gloo"),
            scaling_config=ScalingConfig(num_workers=workers, use_gpu=gpus, resources_per_worker={"CPU": cpus}),
            run_config=RunConfig(name="ray_train", storage_path=os.path.abspath(folder),
                                 failure_config=FailureConfig(max_failures=0)))
        trainer.fit()
    except Exception as exc:  # a worker's error, with its traceback
        causes = list(worker_errors(exc).values()) or [exc]
        print(f"error: {type(causes[0]).__name__}: {causes[0]} (checkpoint.pt holds the last good epoch)",
              file=sys.stderr)
        return 1
    finally:
        ray.shutdown()
    print(f"done: {folder / 'metrics.jsonl'}")
    return 0


def worker_main(job) -> None:
    """One worker: rank 0 writes the run's folder as ``xbm-tune train`` does; the others train in step."""
    from pathlib import Path

    import ray.train.torch

    from tune.options import train_config
    from xbm.cpus import use_cpus
    from xbm.training.distributed import Ranks
    from xbm.signals import collapse_warning
    from xbm.trainer import Trainer
    from xbm.training.rng import seed_everything

    cfg = train_config(job["config"])
    # this rank's GPU among those Train made visible; the CPU otherwise
    cfg = cfg.replace(device=str(ray.train.torch.get_device()) if job["gpus"] else "cpu")
    seed_everything(cfg.seed)
    ranks = Ranks.from_process_group()
    trainer = Trainer(cfg, cpus=use_cpus(job["cpus"]), ranks=ranks,
                      **rank_bars(job.get("progress", False), ranks.is_main))
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
