"""Exact Euclidean k-nearest-neighbour search, block by block, never holding an N x M distance matrix.

Backends (``KNN_BACKENDS``):

- ``faiss``: faiss ``IndexFlatL2`` (exact), filled once with the gallery, searched one query block at a time
  (through PML's ``FaissKNN``). CPU only here (faiss-cpu); CUDA tensors are copied to the host.
- ``torch``: for a separate gallery, PML's ``CustomKNN`` with ``LpDistance(normalize_embeddings=False)``,
  chunked over query rows; for leave-one-out, the symmetric search below. Runs on the tensors' device.
- ``auto`` (default): faiss for CPU tensors when faiss is importable, torch otherwise (on CUDA, copying to
  faiss-cpu would be slower); except leave-one-out with embeddings of ``SYMMETRIC_MIN_DIM`` (384) or more
  dimensions, which takes the symmetric search. Measured on CPU, one thread, 60,000 x 512: 0.80x the CPU
  time of the faiss search; at 20,000 x 128 it takes 2.2x, since its top-k selection, not the GEMM,
  dominates in low dimension (benchmarks/bench_retrieval.py, docs/evaluation.md).

Symmetric leave-one-out search: d(i, j) = d(j, i), so each pair of row blocks (I, J), I <= J, is computed
once, as one GEMM of augmented vectors [x, |x|^2, 1] . [-2y, 1, |y|^2]^T = |x - y|^2, and serves the top-k
of both I's rows and J's rows: half the multiply-adds of a flat search (faiss or CustomKNN) over the same
set. Self-pairs sit on the diagonal blocks' diagonals, set to +inf, so a row never finds itself, not even
tied with an exact duplicate. A row's running top-k is merged with its row of a tile only when the tile's
minimum beats the row's current k-th distance (a cheap min-reduction skips the rest), so the top-k
selection, the part that does not shrink with symmetry, stays small next to the GEMM in 512 dimensions.
"""
from __future__ import annotations

from typing import Callable, Iterator

import torch
from pytorch_metric_learning.distances import LpDistance
from pytorch_metric_learning.utils.inference import CustomKNN, FaissKNN

from xbm.runtime.precision import full_fp32_matmul

try:  # faiss is optional: the torch search finds the same neighbours.
    import faiss
except ImportError:  # pragma: no cover - exercised only where faiss-cpu is absent
    faiss = None

KNN_BACKENDS = ("auto", "faiss", "torch")
BLOCK_ELEMENTS = 2**24  # a query block's k-NN table (rows x k); PML's MAP@R makes a few float64 copies of it
MAX_BLOCK_ROWS = 4096  # faiss's own BLAS query block: larger blocks buy nothing
TORCH_DISTANCE_ELEMENTS = 2**25  # one CustomKNN distance chunk, rows x gallery (128 MiB in fp32)
SYMMETRIC_BLOCK = 2048  # rows per block of the symmetric search: a 2048 x 2048 distance tile (16 MiB)
SYMMETRIC_STATE_ELEMENTS = 2**25  # its running top-k for every row (N x k), 12 bytes each: 384 MiB at most
SYMMETRIC_MIN_DIM = 384  # below, faiss's flat search is faster on CPU (measured break-even ~ 400)


def iter_neighbours(query: torch.Tensor, depth: int, gallery: torch.Tensor | None = None, *,
                    knn: str = "auto") -> Iterator[tuple[int, torch.Tensor]]:
    """Yield ``(start, indices)`` for consecutive blocks of query rows: ``indices`` is (rows, depth) int64,
    the ``depth`` nearest gallery rows of ``query[start:start + rows]``, nearest first.

    ``gallery=None``: leave-one-out on ``query`` (a row never lists itself). The caller checks inputs:
    2-D fp32 on one device, finite, and 1 <= depth <= gallery rows (minus 1 under leave-one-out).
    """
    if knn not in KNN_BACKENDS:
        raise ValueError(f"knn must be one of {list(KNN_BACKENDS)}, but got {knn!r}")
    if knn == "faiss" and faiss is None:
        raise ValueError("knn='faiss' needs the faiss package (pip install faiss-cpu); use knn='torch' or 'auto'")
    leave_one_out = gallery is None
    reference = query if leave_one_out else gallery
    faiss_default = faiss is not None and reference.device.type == "cpu"
    symmetric = leave_one_out and len(query) * depth <= SYMMETRIC_STATE_ELEMENTS and (
        knn == "torch" or (knn == "auto" and (query.shape[1] >= SYMMETRIC_MIN_DIM or not faiss_default)))
    if symmetric:
        yield from _symmetric_neighbours(query, depth)
        return
    use_faiss = knn == "faiss" or (knn == "auto" and faiss_default)
    search = _faiss_search(reference) if use_faiss else _torch_search(reference)
    rows = max(1, min(MAX_BLOCK_ROWS, BLOCK_ELEMENTS // depth))
    for start in range(0, len(query), rows):
        if leave_one_out:
            yield start, _drop_self(search(query[start: start + rows], depth + 1), start)
        else:
            yield start, search(query[start: start + rows], depth)


def _faiss_search(gallery: torch.Tensor) -> Callable[[torch.Tensor, int], torch.Tensor]:
    finder = FaissKNN(reset_before=False, reset_after=False)  # one IndexFlatL2, filled once, all blocks
    finder.train(gallery)
    return lambda block, k: finder(block, k)[1].to(block.device)


def _torch_search(gallery: torch.Tensor) -> Callable[[torch.Tensor, int], torch.Tensor]:
    rows = max(1, TORCH_DISTANCE_ELEMENTS // len(gallery))
    finder = CustomKNN(LpDistance(normalize_embeddings=False, p=2, power=1), batch_size=rows)

    def search(block: torch.Tensor, k: int) -> torch.Tensor:
        with full_fp32_matmul():  # exact distances on a CUDA run too
            return finder(block, k, gallery)[1]

    return search


def _drop_self(indices: torch.Tensor, offset: int) -> torch.Tensor:
    """Remove each query's own index (global row ``offset + i``) from its (k + 1) neighbours.

    Usually self is first, but exact duplicates tie with it at distance 0; if self is missing from the
    list, the last (farthest) neighbour is dropped instead, as PML's ``return_results`` does.
    """
    own = torch.arange(offset, offset + len(indices), device=indices.device)[:, None]
    is_self = indices == own
    is_self[~is_self.any(dim=1), -1] = True
    return indices[~is_self].view(len(indices), -1)


def _symmetric_neighbours(x: torch.Tensor, depth: int) -> Iterator[tuple[int, torch.Tensor]]:
    """Leave-one-out top-``depth`` of every row of x, one GEMM per block pair I <= J (module docstring).

    Row block I is complete once paired with every J >= I (pairs J < I came earlier), so it is yielded
    then and its running top-k freed; the others wait in ``best`` (N x depth at most).
    """
    n, block = len(x), SYMMETRIC_BLOCK
    squared = (x * x).sum(dim=1, keepdim=True)
    ones = torch.ones_like(squared)
    left = torch.cat([x, squared, ones], dim=1)  # (n, D + 2)
    right = torch.cat([-2.0 * x, ones, squared], dim=1)  # left[i] . right[j] = |x_i - x_j|^2
    starts = range(0, n, block)
    best: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for position, s in enumerate(starts):
        e = min(s + block, n)
        for t in starts[position:]:
            f = min(t + block, n)
            with full_fp32_matmul():  # not TF32 on a CUDA run: |x|^2 + |y|^2 - 2 x.y cancels
                tile = left[s:e] @ right[t:f].T  # (e - s, f - t) squared distances
            if t == s:
                tile.fill_diagonal_(float("inf"))  # self-pairs
            best[s] = _merge(best.get(s) or _empty(e - s, depth, x.device), tile, t)
            if t != s:
                # Copy the transpose once (12 ms at 2048 x 2048): gathering strided rows costs ~3x that.
                best[t] = _merge(best.get(t) or _empty(f - t, depth, x.device), tile.T.contiguous(), s)
        yield s, best.pop(s)[1]


def _empty(rows: int, depth: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.full((rows, depth), float("inf"), device=device),
            torch.full((rows, depth), -1, dtype=torch.long, device=device))


def _merge(current: tuple[torch.Tensor, torch.Tensor], tile: torch.Tensor, offset: int):
    """Running (distances, indices), each (rows, k), merged with a tile of distances to columns
    ``offset ...``: the k smallest of both, sorted. Rows whose nearest entry in the tile does not beat
    their current k-th distance skip the tile's top-k."""
    distances, indices = current
    k = distances.shape[1]
    hit = (tile.amin(dim=1) < distances[:, -1]).nonzero().squeeze(1)
    if len(hit) == 0:
        return current
    tile_d, tile_i = torch.topk(tile.index_select(0, hit), min(k, tile.shape[1]), dim=1, largest=False,
                                sorted=False)
    pooled_d = torch.cat([distances[hit], tile_d], 1)
    pooled_i = torch.cat([indices[hit], tile_i + offset], 1)
    merged_d, order = torch.topk(pooled_d, k, dim=1, largest=False)
    distances[hit], indices[hit] = merged_d, torch.gather(pooled_i, 1, order)  # our own buffers: in place
    return distances, indices
