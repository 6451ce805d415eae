"""``nmi``'s k-means, the two faiss paths side by side (xbm/evaluate/kmeans.py), at the test splits' sizes.

For each size, the same clustered unit vectors (classes around random centres on the sphere) are clustered
into as many clusters as classes and scored (scikit-learn's NMI, as ``xbm.evaluate.metrics.nmi`` scores) by
both k-means of ``xbm.evaluate.kmeans``, one after the other in this process:
- on the CPU: faiss's C++ k-means (what a CPU run clusters with, and every run did before this path);
- on ``--device`` (default: CUDA when present): faiss's Python loop over the torch assignment, which a GPU run
  takes. Without CUDA it runs on the CPU, which says what the path costs there, not what it saves on a GPU.
Each row: wall seconds (best of ``--repeats``, the device synchronised), the ratio device / C++, and both NMI
values (different initial draws: they differ by up to ~0.02, as two seeds do).

    python benchmarks/bench_nmi.py                     # bench-gpu, CUB, Cars, SOP (2 CPU cores: SOP's device path
                                                       # alone 157 s a repeat; --repeats 1)
    python benchmarks/bench_nmi.py --sizes bench,cub   # the small ones
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from sklearn.metrics import normalized_mutual_info_score

from xbm.evaluate.kmeans import device_kmeans, kmeans_for
from xbm.evaluate.metrics import NMI_SEED

# name -> (embeddings, classes, what): the test splits' sizes (SOP: 60,502 images of 11,316 products)
SIZES = {"bench": (2000, 100, "bench_gpu test split"),
         "cub": (5924, 100, "CUB-200-2011 test"),
         "cars": (8131, 98, "Cars196 test"),
         "sop": (60502, 11316, "SOP test")}


def clustered(n: int, classes: int, dim: int, noise: float, seed: int = 0):
    """(n, dim) unit vectors, labels: class centres on the sphere plus Gaussian noise (classes of n / classes)."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    centres = torch.nn.functional.normalize(torch.randn(classes, dim, generator=generator), dim=1)
    x = centres[labels] + noise * torch.randn(n, dim, generator=generator) / dim**0.5
    return torch.nn.functional.normalize(x, dim=1), labels


def timed(fn, device: torch.device, repeats: int) -> tuple[float, float]:
    """(best wall seconds over ``repeats``, the value), the device's queued work counted."""
    best, value = float("inf"), None
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        value = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best, value


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated, of {', '.join(SIZES)}")
    parser.add_argument("--device", default="auto", help="the device path's device (auto: cuda when present)")
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--noise", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    names = args.sizes.split(",")
    unknown = [n for n in names if n not in SIZES]
    if unknown:
        parser.error(f"--sizes: unknown {unknown}; choose from {list(SIZES)}")
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    import faiss

    gpu = f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    print(f"nmi k-means: faiss {faiss.__version__} C++ on {os.cpu_count()} CPUs ({faiss.omp_get_max_threads()} "
          f"threads) against faiss's loop + torch assignment on {device}{gpu}; torch {torch.__version__}; "
          f"{args.dim} dims, best of {args.repeats}", flush=True)
    print(f"  {'size':<40} {'C++ s':>8} {'device s':>9} {'ratio':>7} {'nmi C++':>8} {'nmi dev':>8}", flush=True)
    cpp_kmeans = kmeans_for(torch.device("cpu"), NMI_SEED)   # faiss's C++ (PML's FaissKMeans)

    def score(kmeans, x, labels, classes) -> float:
        return normalized_mutual_info_score(labels.numpy(), kmeans(x, classes).cpu().numpy())

    def on_device(x, classes):   # x already on the device, as a GPU run's embeddings are
        return device_kmeans(x, classes, seed=NMI_SEED)

    x, labels = clustered(200, 10, args.dim, args.noise)   # imports, faiss's and torch's first calls
    score(cpp_kmeans, x, labels, 10), score(on_device, x.to(device), labels, 10)
    for name in names:
        n, classes, what = SIZES[name]
        x, labels = clustered(n, classes, args.dim, args.noise)
        cpp_s, cpp = timed(lambda: score(cpp_kmeans, x, labels, classes), torch.device("cpu"), args.repeats)
        x_device = x.to(device)
        device_s, dev = timed(lambda: score(on_device, x_device, labels, classes), device, args.repeats)
        label = f"{name}: {n:,} x {classes:,} ({what})"
        print(f"  {label:<40} {cpp_s:8.3f} {device_s:9.3f} {device_s / cpp_s:6.2f}x {cpp:8.4f} {dev:8.4f}",
              flush=True)


if __name__ == "__main__":
    main()
