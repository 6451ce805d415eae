"""k-means for ``nmi`` (:func:`xbm.evaluate.metrics.nmi`), where the embeddings are.

:func:`kmeans_for` picks the implementation by the embeddings' device, each seeded, 25 iterations:

- CPU tensors, faiss installed: faiss's C++ ``Kmeans`` (through PML's ``FaissKMeans``), on its CPU threads.
- Any other device (CUDA), faiss installed: faiss's own Python k-means (``faiss.contrib.clustering.kmeans``:
  the C++ loop's seeded initialisation from distinct points, Lloyd iterations and splitting of empty
  clusters) over :class:`DeviceAssign`, whose assignment and centroid steps run in torch on the embeddings'
  device. faiss-cpu would copy them to the host and cluster them on the CPU threads beside the loader
  workers: on an H100 node (16 cores, 15 workers) ``nmi`` took 0.05-0.06 s for 2,000 x 100 (2026-11-27, run
  H), where the 2-core CI machine takes 0.014 s; and its work grows as N x k x d: SOP's 60,502 x 11,316 x 512
  is 0.7 TFLOP an iteration (docs/evaluation.md, "nmi's k-means": the figures).
- No faiss: scikit-learn's ``KMeans`` on the CPU (slow at SOP's size; ``nmi`` warns).

Why a path without faiss, when pyproject.toml requires faiss-cpu: a deliberate fallback, kept and tested.
``pip install xbm-tune`` always brings faiss, but installs that cannot carry or import it must still evaluate:
the air-gapped GPU node's wheelhouse (``scripts/gpu_wheels.sh``) leaves faiss-cpu's 18 MB wheel out to stay
under the 64 MiB one call carries, the H100 image has no faiss (docs/gpu_leases.md: ``nmi`` once failed there
with ``NameError: name 'faiss' is not defined``), and a faiss wheel built against another numpy may not
import. So ``xbm.evaluate.knn`` imports faiss optionally, the k-NN falls back to torch (the same neighbours)
and ``nmi`` to scikit-learn's k-means (seeded too, but another clustering than faiss's, so not the same
NMI to the bit; 16x slower at 10,000 x 2,000 on 2 cores, docs/evaluation.md). Tested:
``tests/xbm/evaluate/test_kmeans.py`` (the choice without faiss), ``test_paper_metrics.py`` (``nmi`` with faiss
hidden from PML and xbm, and its slowness warning), ``tests/scripts/test_gpu_check_env.py`` (gpu_check names the
k-means it measured).

Both faiss paths cluster the same way, but not to the same bits (different random streams for the
initial centroids): one seed's NMI differs by up to ~0.02 from path to path, as from seed to seed; averaged
over four seeds they agree within 0.01 (tests/xbm/evaluate/test_kmeans.py).
Each path gives the same clustering of the same embeddings in every run: the device path's centroid sums
are :func:`xbm.normalisers.stats.sum_by_group` (a one-hot product off the CPU, no atomics) and its distances
full fp32 (no TF32, which would reorder near-equidistant centroids from one device's settings to another's).
"""
from __future__ import annotations

import contextlib
import functools
import io
from typing import Callable

import numpy as np
import torch

from xbm.evaluate import knn as knn_search
from xbm.normalisers.stats import sum_by_group
from xbm.runtime.precision import full_fp32_matmul

ITERATIONS = 25  # faiss's default (faiss.Kmeans and contrib's kmeans)
ASSIGN_ELEMENTS = 2**25  # one block of the assignment's distances, rows x clusters (128 MiB in fp32)

KMeans = Callable[[torch.Tensor, int], torch.Tensor]  # (embeddings [N, d], clusters) -> cluster ids [N]


def kmeans_for(device: torch.device, seed: int) -> KMeans:
    """The seeded k-means for embeddings on ``device`` (module docstring), in PML's ``kmeans_func`` form."""
    if knn_search.faiss is None:
        return functools.partial(_sklearn_kmeans, seed=seed)
    if device.type == "cpu":
        from pytorch_metric_learning.utils.inference import FaissKMeans

        # A retrieval class has a handful of samples (SOP: ~5), far under the 39 per centroid below which faiss
        # prints a warning to stdout at every call; min_points_per_centroid changes nothing else.
        return FaissKMeans(seed=seed, niter=ITERATIONS, min_points_per_centroid=1)
    return functools.partial(device_kmeans, seed=seed)


def device_kmeans(x: torch.Tensor, clusters: int, seed: int) -> torch.Tensor:
    """Cluster ids [N] (int64, on ``x``'s device) of faiss's Python k-means over :class:`DeviceAssign`."""
    from faiss.contrib.clustering import kmeans

    data = DeviceAssign(x.float())
    # faiss 1.15's contrib kmeans prints "preproc..." whatever its verbose says: every evaluation, every trial's log
    with contextlib.redirect_stdout(io.StringIO()):
        centroids = kmeans(clusters, data, niter=ITERATIONS, seed=seed, verbose=False)
    return data.perform_search(centroids)[1]


class DeviceAssign:
    """The data side of faiss's Python k-means (its ``DatasetAssign`` interface) for a torch tensor [N, d] on
    any device: squared Euclidean distances to the centroids in full fp32, block by block
    (:data:`ASSIGN_ELEMENTS`), and the sums of the rows assigned to each centroid."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x
        self.squares = x.square().sum(dim=1)

    def count(self) -> int:
        return self.x.shape[0]

    def dim(self) -> int:
        return self.x.shape[1]

    def get_subset(self, indices: np.ndarray) -> torch.Tensor:
        """The rows at ``indices`` (faiss's initial centroids), a copy."""
        return self.x[torch.as_tensor(np.asarray(indices), device=self.x.device)]

    def perform_search(self, centroids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(squared distance to the nearest centroid [N], its index [N]): |x|^2 - 2 x.c + |c|^2."""
        rows = max(1, ASSIGN_ELEMENTS // max(1, len(centroids)))
        centre_squares = centroids.square().sum(dim=1)
        nearest = []
        with full_fp32_matmul():
            for start in range(0, self.count(), rows):
                block = slice(start, start + rows)
                distances = torch.addmm(self.squares[block, None], self.x[block], centroids.T, alpha=-2)
                nearest.append(distances.add_(centre_squares).min(dim=1))
        return (torch.cat([d for d, _ in nearest]).clamp_min_(0), torch.cat([i for _, i in nearest]))

    def assign_to(self, centroids: torch.Tensor) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
        """(each row's centroid, on the host: faiss counts them with numpy; its squared distance; the sum of
        each centroid's rows [k, d], which faiss divides by the counts)."""
        distances, assigned = self.perform_search(centroids)
        return assigned.cpu().numpy(), distances, sum_by_group(self.x, assigned, len(centroids))


def _sklearn_kmeans(x: torch.Tensor, clusters: int, seed: int) -> torch.Tensor:
    from sklearn.cluster import KMeans

    return torch.as_tensor(KMeans(clusters, random_state=seed, n_init=1).fit_predict(x.cpu().numpy()))
