"""Seconds to a loader's first batch over an in-memory decoded pack, per worker start method, and the bytes
each worker receives.

A loader whose workers start by ``spawn`` (macOS) or ``forkserver`` (Linux from Python 3.14) pickles its data
set into every worker; ``fork`` pickles nothing. Before xbm/data/shared.py the pack's pixels went along, once
per worker (2.9 GB x 15 workers on an H100 node); now a worker receives a handle to shared memory, so the first
batch costs what starting the workers costs, whatever the pack's size. The data set is the trainer's: a
SampleDataset whose decoded-image reader is a PackedImages of 256x256 grey images, evaluation transform.

CPU seconds count this process and its ended children: spawned and forked workers, not forkserver's (the
server's children). A worker's private memory (Linux's RssAnon, read by the worker after its first batch) holds
any copy of the pack it received; mapped shared pages are not in it (a forked worker's counts the parent's pages
it shares copy-on-write).

    python benchmarks/bench_worker_start.py                     # 500 MiB, 2 workers, 3 loaders per method
    python benchmarks/bench_worker_start.py --mib 2900 --workers 15
    python benchmarks/bench_worker_start.py --smoke-test        # 16 MiB, 1 loader
"""
from __future__ import annotations

import argparse
import resource
import time
from multiprocessing.reduction import ForkingPickler

import numpy as np
from torch.utils.data import DataLoader, default_collate
from torchvision import transforms as T

from xbm.data.base import SampleDataset, Transforms
from xbm.data.cache import PackedImages
from xbm.data.sources import ArrayImageSource

SIDE = 256  # 64 KiB per grey image


def pack_dataset(mib: int) -> SampleDataset:
    n = max(1, mib * 2**20 // SIDE**2)
    pixels = np.random.default_rng(0).integers(0, 256, n * SIDE**2, dtype=np.uint8)
    transforms = Transforms(SIDE)
    transforms.images = PackedImages(pixels, np.arange(n + 1, dtype=np.int64) * SIDE**2,
                                     np.full((n, 2), SIDE, dtype=np.int64), "L")
    transforms.eval = T.PILToTensor()
    # The reader decodes; the source is never read (a placeholder, as small as a source can be).
    return SampleDataset(ArrayImageSource(np.zeros((1, 1, 1), np.uint8)), np.arange(n), np.arange(n) % 100,
                         transforms, "eval")


def cpu_seconds() -> float:
    """This process's and its ended children's CPU time (a figure that a loaded machine stretches less)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def collate_with_memory(items: list) -> tuple:
    """The batch, and the private memory (MiB) of the worker that made it (None off Linux)."""
    try:
        with open("/proc/self/status") as status:
            anon = next(int(line.split()[1]) for line in status if line.startswith("RssAnon:")) / 1024
    except (OSError, StopIteration):
        anon = None
    return default_collate(items), anon


def first_batch(dataset: SampleDataset, workers: int, method: str) -> tuple[float, float, float]:
    """(seconds to the first batch, CPU seconds of the parent and the workers until they have ended, the private
    memory of the worker that made it)."""
    loader = DataLoader(dataset, batch_size=32, num_workers=workers, multiprocessing_context=method,
                        collate_fn=collate_with_memory)
    cpu, start = cpu_seconds(), time.perf_counter()
    batches = iter(loader)
    _, private = next(batches)
    wall = time.perf_counter() - start
    del batches   # the iterator ends and joins its workers: their CPU time is counted
    return wall, cpu_seconds() - cpu, private


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=500, help="decoded pack size")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--loaders", type=int, default=3, help="loaders started one after another per method")
    parser.add_argument("--methods", default="fork,spawn,forkserver")
    parser.add_argument("--smoke-test", action="store_true")
    args = parser.parse_args()
    mib, loaders = (16, 1) if args.smoke_test else (args.mib, args.loaders)
    for method in args.methods.split(","):
        dataset = pack_dataset(mib)   # a fresh one per method: nothing moved to shared memory yet
        times = [first_batch(dataset, args.workers, method) for _ in range(loaders)]
        received = len(ForkingPickler.dumps(dataset)) if method != "fork" else 0   # after: loader 1 paid any move
        print(f"{method}: {mib} MiB pack, {args.workers} workers, each receives {received / 2**20:.3f} MiB; "
              f"first batch of loader 1..{loaders}: "
              + ", ".join(f"{w:.2f} s ({c:.1f} CPU s, worker's private memory {p:.0f} MiB)" for w, c, p in times),
              flush=True)


if __name__ == "__main__":
    main()
