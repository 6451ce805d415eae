"""What an epoch waits for its loader at its start, with and without ``prefetch_next_epoch``, side by side.

A CPU stand-in for the H100's 15-batch epochs (docs/trainer.md, "On a GPU"), where each epoch waited 0.2-0.4 s
of its 1 s pass for its first batches: the trainer (``fit()``) on the digits with ``--workers`` loader workers
whose every sample takes ``--sample-ms`` of sleep (a worker decoding and augmenting a photo, without taking a
core from this 2-core machine's training process), short epochs and an evaluation after each (what a drawn
pass has to be prepared in). Per row: the median over the epochs after the first of the data wait
(``data_wait_s``), the training pass (``train_s``), evaluation (``eval_s``) and the whole epoch with its
checkpoint (``epoch_time_s`` + a ``torch.save``); the rows run one after the other in one process.

    python benchmarks/bench_epoch_start.py           # 6 epochs, 4 workers, 1 ms a sample
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xbm.config import TrainConfig  # noqa: E402
from xbm.data.base import SampleDataset  # noqa: E402
from xbm.trainer import Trainer  # noqa: E402


def slow_samples(ms: float) -> None:
    """Every sample fetched in a worker process takes ``ms`` more (forked workers inherit the patch)."""
    fetch, main = SampleDataset.__getitem__, os.getpid()

    def slow(self, index):
        if os.getpid() != main:
            time.sleep(ms / 1000)
        return fetch(self, index)

    SampleDataset.__getitem__ = slow


def checkpointed(trainer: Trainer):
    """``trainer.fit()``'s rows, each with the seconds of a ``torch.save(state_dict())`` after it (a sweep's
    checkpoint: the other time a pass drawn ahead is prepared in) as ``checkpoint_s``."""
    with tempfile.TemporaryDirectory() as folder:
        for row in trainer.fit():
            start = time.perf_counter()
            torch.save(trainer.state_dict(), Path(folder) / "checkpoint.pt")
            yield {**row, "checkpoint_s": time.perf_counter() - start}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--sample-ms", type=float, default=1.0)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)
    slow_samples(args.sample_ms)
    values = {"dataset": "digits", "model": "test_resnet", "image_size": 16, "batch_size": args.batch,
              "samples_per_class": 8, "embedding_size": 32, "warmup_epochs": 0, "epochs": args.epochs,
              "num_workers": str(args.workers),
              "memory.enabled": False, "device": "cpu"}
    trainers = {name: Trainer(TrainConfig.from_dict({**values, "prefetch_next_epoch": flag}))
                for name, flag in (("drawn ahead (default)", True), ("cold start", False))}
    # one row after the other: alternating epochs would give a pass drawn ahead the other row's epoch to be
    # prepared in, where a run gives it its own evaluation only
    rows = {name: list(checkpointed(trainer)) for name, trainer in trainers.items()}
    for trainer in trainers.values():
        trainer.close()
    batches = len(next(iter(trainers.values())).loader)
    print(f"digits, test_resnet at 16 px, batch {args.batch}, {args.workers} workers x {args.sample_ms} ms a sample "
          f"(sleep), {args.epochs} epochs of {batches} batches per row; medians of epochs 2-{args.epochs}")
    print(f"{'row':<24}{'data wait s':>12}{'training s':>12}{'wait / pass':>13}{'eval s':>9}{'epoch s':>9}")
    for name, epochs in rows.items():
        later = epochs[1:]
        wait, train, evaluation, whole = (statistics.median(e[key] for e in later)
                                          for key in ("data_wait_s", "train_s", "eval_s", "epoch_time_s"))
        whole += statistics.median(e["checkpoint_s"] for e in later)
        print(f"{name:<24}{wait:>12.3f}{train:>12.3f}{wait / train:>13.2f}{evaluation:>9.3f}{whole:>9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
