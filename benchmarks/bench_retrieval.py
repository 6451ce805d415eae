"""Recall@K / MAP@R of ``xbm.evaluate.retrieval_metrics`` against a bare faiss-cpu ``IndexFlatL2`` search.

The baseline is the search alone, with the depth the metrics need (max K, and R for MAP@R; plus the query
itself under leave-one-out): it computes no metric, so ``ours / faiss`` is the price of everything
``retrieval_metrics`` does beyond that search (search strategy, self-removal, label look-ups, PML's metrics).

Two protocols on the same data, all timings in one process, one after the other:
1. leave-one-out over the whole gallery (SOP's protocol): ``knn="auto"`` (the symmetric torch search),
   ``knn="faiss"`` and the CustomKNN torch fallback (symmetric search disabled);
2. ``--queries`` separate queries against the gallery (In-shop's protocol): ``knn="auto"`` (faiss here)
   and ``knn="torch"`` (CustomKNN).
Data: N unit vectors in classes of ``--per-class`` samples around random centres on the sphere.

    python benchmarks/bench_retrieval.py            # gallery 60,000 x 512 (minutes on 2 busy cores)
    python benchmarks/bench_retrieval.py --quick    # gallery 10,000 x 512
"""
from __future__ import annotations

import argparse
import os
import time

import faiss
import numpy as np
import torch

from xbm.evaluate import knn as knn_module
from xbm.evaluate import retrieval_metrics


def clustered_embeddings(n: int, dim: int, per_class: int, noise: float, seed: int):
    """(n, dim) L2-normalised embeddings, labels: class centres on the sphere plus Gaussian noise."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) // per_class
    centres = torch.nn.functional.normalize(torch.randn(int(labels.max()) + 1, dim, generator=gen), dim=1)
    x = centres[labels] + noise * torch.randn(n, dim, generator=gen) / dim**0.5
    return torch.nn.functional.normalize(x, dim=1), labels


def faiss_flat_search(query: torch.Tensor, gallery: torch.Tensor, k: int) -> np.ndarray:
    index = faiss.IndexFlatL2(gallery.shape[1])
    index.add(gallery.numpy())
    return index.search(query.numpy(), k)[1]


REPEATS = 1


def timed(fn):
    """(result, (wall seconds, CPU seconds of this process)), each the best of ``REPEATS`` runs: on a shared
    machine the CPU time is the steadier measure of work (wall time also counts other processes' turns)."""
    walls, cpus = [], []
    for _ in range(REPEATS):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return out, (min(walls), min(cpus))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="gallery of 10,000 instead of 60,000")
    parser.add_argument("--n", type=int, default=None, help="gallery size (overrides --quick)")
    parser.add_argument("--queries", type=int, default=None, help="separate queries (default: n / 6)")
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--per-class", type=int, default=5)
    parser.add_argument("--noise", type=float, default=3.0)
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--skip-torch", action="store_true", help="skip the CustomKNN fallback timings")
    parser.add_argument("--repeats", type=int, default=None, help="best of R runs per row (default 1; 3 with --quick)")
    args = parser.parse_args(argv)
    global REPEATS
    REPEATS = args.repeats or (3 if args.quick else 1)
    n = args.n or (10_000 if args.quick else 60_000)
    n_queries = args.queries or n // 6
    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    x, labels = clustered_embeddings(n + n_queries, args.dim, args.per_class, args.noise, seed=0)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1))
    gallery, gallery_labels = x[order[:n]].contiguous(), labels[order[:n]]
    query, query_labels = x[order[n:]].contiguous(), labels[order[n:]]
    depth = max(max(args.ks), args.per_class - 1)  # what retrieval_metrics searches: max(K, R)
    print(f"gallery {n} x {args.dim}, classes of {args.per_class}, ks={args.ks}, {args.threads} threads, "
          f"best of {REPEATS}, faiss {faiss.__version__}, torch {torch.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}")

    print(f"  {'':<52} {'wall s':>8} {'ratio':>7} {'CPU s':>8} {'ratio':>7}")

    def row(label, seconds, baseline):
        (wall, cpu), (base_wall, base_cpu) = seconds, baseline
        print(f"  {label:<52} {wall:8.2f} {wall / base_wall:6.3f}x {cpu:8.2f} {cpu / base_cpu:6.3f}x")

    print(f"leave-one-out over the gallery ({n} queries)")
    _, t_flat = timed(lambda: faiss_flat_search(gallery, gallery, depth + 1))
    row(f"faiss IndexFlatL2 search, k={depth + 1} (baseline)", t_flat, t_flat)
    loo, t_auto = timed(lambda: retrieval_metrics(gallery, gallery_labels, ks=args.ks))
    row("retrieval_metrics, knn='auto' (symmetric search)", t_auto, t_flat)
    loo_faiss, t_faiss = timed(lambda: retrieval_metrics(gallery, gallery_labels, ks=args.ks, knn="faiss"))
    row("retrieval_metrics, knn='faiss'", t_faiss, t_flat)
    results = [loo, loo_faiss]
    if not args.skip_torch:
        symmetric_limit = knn_module.SYMMETRIC_STATE_ELEMENTS
        knn_module.SYMMETRIC_STATE_ELEMENTS = 0  # force PML's CustomKNN, the fallback for very deep searches
        try:
            loo_torch, t_torch = timed(lambda: retrieval_metrics(gallery, gallery_labels, ks=args.ks, knn="torch"))
        finally:
            knn_module.SYMMETRIC_STATE_ELEMENTS = symmetric_limit
        row("retrieval_metrics, knn='torch', CustomKNN", t_torch, t_flat)
        results.append(loo_torch)
    print("  metrics: " + ", ".join(f"{name}={value:.4f}" for name, value in loo.items()))

    print(f"{n_queries} queries against the gallery")
    _, t_flat = timed(lambda: faiss_flat_search(query, gallery, depth))
    row(f"faiss IndexFlatL2 search, k={depth} (baseline)", t_flat, t_flat)
    separate, t_auto = timed(lambda: retrieval_metrics(query, query_labels, gallery, gallery_labels, ks=args.ks))
    row("retrieval_metrics, knn='auto' (faiss)", t_auto, t_flat)
    if not args.skip_torch:
        separate_torch, t_torch = timed(
            lambda: retrieval_metrics(query, query_labels, gallery, gallery_labels, ks=args.ks, knn="torch"))
        row("retrieval_metrics, knn='torch', CustomKNN", t_torch, t_flat)
        agree = all(abs(separate[k] - separate_torch[k]) < 1e-3 for k in separate)
        print(f"  faiss and torch agree: {agree}")
    print("  metrics: " + ", ".join(f"{name}={value:.4f}" for name, value in separate.items()))
    agree = all(abs(r[k] - loo[k]) < 1e-3 for r in results for k in loo)
    print(f"leave-one-out backends agree: {agree}")


if __name__ == "__main__":
    main()
