"""``xbm-tune train --workers N``: one training run as a data-parallel run of N Ray Train workers on a local
Ray, writing the same output folder as ``xbm-tune train`` (``xbm.train_cli``).

The command's flags and its one-worker body stay in ``xbm.train_cli`` (no Ray in ``xbm``); this module adds
``--workers`` and, for N > 1, starts a local Ray and a ``TorchTrainer`` (gloo on the CPU; NCCL with one GPU
per worker when the machine has N GPUs: ``tune.trial.data_parallel.train_run``). Rank 0 writes ``config.yaml``,
``metrics.jsonl`` / ``metrics.csv``, ``checkpoint.pt`` and ``best_weights.pt`` as the one-worker run does; the other ranks train in step. Rank 0 shows
the one-worker run's progress bars, drawn on this terminal through Ray (``tune.trial.ray_progress``), unless
``--no-progress`` or stderr is not a terminal.
Bad input (``--workers 0``, a global batch that does not split into whole classes per rank, fewer GPUs than
workers on a GPU machine, an occupied output folder) exits 2 before Ray starts.
"""
from __future__ import annotations

import argparse
import sys

from tune.trial.ray_progress import driver_draws_bars
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
    """``xbm.train_cli.run`` for one worker; otherwise the run on Ray Train.

    Args:
        args: the parsed arguments of ``xbm-tune train`` (``add_arguments``).

    Returns:
        The exit status: 0 when the run finished, 1 when it failed, 2 on bad input (the message printed).

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    workers = getattr(args, "workers", 1)
    if workers == 1:
        return train_cli.run(args)
    try:
        cfg, folder, gpus = _checked(args, workers)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from tune.trial.data_parallel import train_run

    try:
        train_run(cfg, folder, workers, gpus, driver_draws_bars(getattr(args, "progress", True)))
    except Exception as exc:  # a worker's own error
        print(f"error: {type(exc).__name__}: {exc} (checkpoint.pt holds the last good epoch)", file=sys.stderr)
        return 1
    print(f"done: {folder / 'metrics.jsonl'}")
    return 0


def _checked(args: argparse.Namespace, workers: int):
    """The run's TrainConfig (with ``workers``), its output folder and whether it uses GPUs; ValueError
    naming the flag and the rule on bad input (nothing started)."""
    import torch

    from tune.driver.workers import check_batch_split
    from tune.errors import SweepInputError

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
