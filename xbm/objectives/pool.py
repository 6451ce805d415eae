"""Neighbour-mined positives (Misios thesis, seed 004, §3.2, after InsCLR): candidate pools, tuples, sampler.

Step 1, ``build_pool``: an offline candidate pool per training image, its top ``size`` (250) other images by
inner product of L2-normalised embeddings (= cosine similarity), exact, as the thesis builds it with faiss IP.
Steps 2-3, ``tuples`` and ``NeighbourSampler``: a batch is ``batch_size / (k + 1)`` random anchors (16), each
followed by its ``k`` (3) nearest pool members with similarity >= T_h1 (0.95), Eq. 3.6:

    P+(x_r) = {x in CP(x_r) : g(x) in NN_k(y_r), S_c(g(x), y_r) >= T_h1}

An anchor with fewer than ``k`` such members is completed with itself: the data loader augments every item
independently, so a repeated anchor is an augmented view of it, the instance-discrimination positive (§3.1).
Every tuple is one pseudo-class; within a batch, tuple ``t`` occupies positions ``t(k+1) ... t(k+1)+k``,
its anchor first. Labels are never read.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Sampler

from xbm.runtime.precision import full_fp32_matmul

try:  # faiss is optional: the torch search finds the same pools.
    import faiss
except ImportError:  # pragma: no cover - exercised only where faiss-cpu is absent
    faiss = None

TORCH_SIMILARITY_ELEMENTS = 2**25  # one chunk of the torch search, rows x n (128 MiB in fp32)
NORM_TOLERANCE = 1e-3  # |‖row‖ - 1| allowed: fp32 rounding of F.normalize, not an unnormalised row


def build_pool(embeddings: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate pool of every row: its ``P = min(size, n - 1)`` most similar other rows, most similar first.

    ``embeddings``: (n, d) fp32, L2-normalised rows, any device. Returns ``(indices, similarities)``, (n, P)
    int64 and fp32 on the embeddings' device. A row never lists itself, not even tied with an exact duplicate.
    Exact search: faiss ``IndexFlatIP`` for CPU tensors (the thesis's tool); the chunked torch search below
    when faiss is missing, or for CUDA tensors (a GEMM on the device beats copying to faiss-cpu).
    """
    _check_pool_rows(embeddings)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"the pool size (neighbours.pool) must be an integer >= 1, but got {size!r}")
    depth = min(size, len(embeddings) - 1)
    if faiss is not None and embeddings.device.type == "cpu":
        return _faiss_pool(embeddings, depth)
    return _torch_pool(embeddings, depth)


def _check_pool_rows(embeddings: torch.Tensor) -> None:
    if not isinstance(embeddings, torch.Tensor) or embeddings.dim() != 2:
        raise ValueError(f"build_pool needs a 2-D (n, d) tensor of embeddings, but got "
                         f"{getattr(embeddings, 'shape', type(embeddings).__name__)}")
    if embeddings.dtype != torch.float32:
        raise ValueError(f"build_pool needs fp32 embeddings, but got {embeddings.dtype}: call .float() first")
    if len(embeddings) < 2:
        raise ValueError(f"build_pool needs at least 2 rows (a row's pool holds the others), got {len(embeddings)}")
    if not torch.isfinite(embeddings).all():
        raise ValueError("build_pool got non-finite embeddings (NaN or inf): the model diverged")
    norms = embeddings.norm(dim=1)
    worst = (norms - 1).abs().max().item()
    if worst > NORM_TOLERANCE:
        raise ValueError(f"build_pool needs L2-normalised rows (inner product = cosine similarity), but a row "
                         f"has norm {norms[(norms - 1).abs().argmax()].item():.4g}: apply F.normalize first")


def _faiss_pool(embeddings: torch.Tensor, depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = np.ascontiguousarray(embeddings.detach().cpu().numpy())
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    sims, indices = index.search(x, depth + 1)  # one extra: self, dropped below
    indices, sims = torch.from_numpy(indices), torch.from_numpy(sims)
    # Self is usually first, but a duplicate ties with it (and rounding may even rank it above): drop self
    # wherever it is, or the last (least similar) entry when self fell outside the depth + 1 found.
    is_self = indices == torch.arange(len(x))[:, None]
    is_self[~is_self.any(dim=1), -1] = True
    keep = ~is_self
    return (indices[keep].view(len(x), depth).to(embeddings.device),
            sims[keep].view(len(x), depth).to(embeddings.device))


def _torch_pool(embeddings: torch.Tensor, depth: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row chunks of x @ x^T (never n x n for large n), self masked to -inf, then a top-k per chunk."""
    x = embeddings.detach()
    n = len(x)
    rows = max(1, TORCH_SIMILARITY_ELEMENTS // n)
    indices, sims = [], []
    for start in range(0, n, rows):
        with full_fp32_matmul():  # the Eq. 3.6 threshold compares exact similarities on a CUDA run too
            block = x[start: start + rows] @ x.T  # (rows, n)
        own = torch.arange(start, start + len(block), device=x.device)
        block[torch.arange(len(block), device=x.device), own] = float("-inf")
        s, i = torch.topk(block, depth, dim=1)  # sorted, most similar first
        indices.append(i)
        sims.append(s)
    return torch.cat(indices), torch.cat(sims)


def tuples(pool_indices: torch.Tensor, pool_sims: torch.Tensor, anchors: torch.Tensor, k: int,
           threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each anchor's up-to-``k`` first pool members with similarity >= ``threshold`` (Eq. 3.6), in pool order;
    the remaining slots hold the anchor itself (an augmented view of it, §3.2).

    ``pool_indices``/``pool_sims``: (n, P) from ``build_pool``; ``anchors``: (a,) int row ids.
    Returns ``(members, found)`` on the pool's device: (a, k) int64 and (a,) int64, the number of real
    neighbours in each row (members[i, found[i]:] == anchors[i]).
    """
    if pool_indices.shape != pool_sims.shape or pool_indices.dim() != 2:
        raise ValueError(f"the pool's indices and similarities must be two (n, P) tensors of one shape, but got "
                         f"{tuple(pool_indices.shape)} and {tuple(pool_sims.shape)}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"neighbours.k must be an integer >= 1, but got {k!r}")
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"neighbours.threshold is a cosine similarity: -1 <= threshold <= 1 must hold, "
                         f"but got {threshold!r}")
    n = len(pool_indices)
    anchors = torch.as_tensor(anchors, device=pool_indices.device)
    if anchors.dim() != 1 or anchors.is_floating_point():
        raise ValueError(f"anchors must be a 1-D tensor of integer row ids, but got {anchors.dtype} "
                         f"of shape {tuple(anchors.shape)}")
    anchors = anchors.long()
    if len(anchors) and (anchors.min() < 0 or anchors.max() >= n):
        raise ValueError(f"anchors must be row ids in [0, {n}), but got values in "
                         f"[{anchors.min().item()}, {anchors.max().item()}]")
    candidates, passes = pool_indices[anchors], pool_sims[anchors] >= threshold  # (a, P)
    # A stable sort on "fails the threshold" brings the passing members to the front, still in pool order.
    order = torch.sort((~passes).to(torch.uint8), dim=1, stable=True).indices[:, :k]
    chosen = torch.gather(candidates, 1, order)
    found = passes.sum(dim=1).clamp(max=k)
    width = chosen.shape[1]  # min(k, P): when k > P the last slots stay the anchor
    members = anchors[:, None].repeat(1, k)
    real = torch.arange(width, device=anchors.device) < found[:, None]
    members[:, :width] = torch.where(real, chosen, anchors[:, None])
    return members, found


class NeighbourSampler(Sampler[int]):
    """Batches of (anchor, k members) tuples for the ``neighbours`` objective (thesis §3.2 steps 2-3).

    An epoch is ``floor(n_train / batch_size)`` batches of ``batch_size`` indices; each batch holds
    ``batch_size / (k + 1)`` anchors, each followed by its ``k`` members (``tuples``). Anchors are drawn
    without replacement over the epoch from ``np.random.permutation``: NumPy's global RNG, like PML's
    ``MPerClassSampler``, so the trainer's seeding and checkpointed RNG state make an epoch reproducible.

    ``pool``: the ``(indices, similarities)`` of ``build_pool`` over the training set, set by the trainer
    before each epoch (and refreshed every ``neighbours.refresh_epochs``). After each ``iter()``:
    ``last_found`` (found per anchor) and ``last_found_fraction`` (mean of found / k over the anchors).
    """

    def __init__(self, n_train: int, batch_size: int, k: int, threshold: float):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"neighbours.k must be an integer >= 1, but got {k!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, but got {batch_size!r}")
        if batch_size % (k + 1):
            raise ValueError(f"a batch holds whole tuples of an anchor and its neighbours.k members: batch_size "
                             f"% (neighbours.k + 1) == 0 must hold, but got batch_size={batch_size}, "
                             f"neighbours.k={k}")
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"neighbours.threshold is a cosine similarity: -1 <= threshold <= 1 must hold, "
                             f"but got {threshold!r}")
        if n_train < batch_size:
            raise ValueError(f"the training set ({n_train} images) must hold at least one batch of "
                             f"batch_size={batch_size}")
        self.n_train, self.batch_size, self.k, self.threshold = n_train, batch_size, k, threshold
        self.num_batches = n_train // batch_size
        self.anchors_per_batch = batch_size // (k + 1)
        self.pool: tuple[torch.Tensor, torch.Tensor] | None = None
        self.last_found: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.num_batches * self.batch_size

    @property
    def last_found_fraction(self) -> float:
        """Mean over the last epoch's anchors of found / k: 1 when every anchor had k neighbours above the
        threshold, 0 when every tuple was the anchor's own views. NaN before the first epoch."""
        if self.last_found is None:
            return float("nan")
        return self.last_found.double().mean().item() / self.k

    def __iter__(self):
        if self.pool is None:
            raise RuntimeError("NeighbourSampler.pool is None: set it to build_pool(train embeddings, "
                               "neighbours.pool) before iterating an epoch")
        indices, sims = (t.detach().cpu() for t in self.pool)
        if len(indices) != self.n_train:
            raise ValueError(f"the candidate pool has {len(indices)} rows but the training set has "
                             f"{self.n_train} images: rebuild it from the current training embeddings")
        # Computed here, not lazily in a generator, so the statistics are ready as soon as iter() returns.
        anchors = torch.from_numpy(np.random.permutation(self.n_train)[: self.num_batches * self.anchors_per_batch])
        members, found = tuples(indices, sims, anchors, self.k, self.threshold)
        self.last_found = found
        groups = torch.cat([anchors[:, None], members], dim=1)  # (anchors, k + 1): consecutive tuples
        return iter(groups.reshape(-1).tolist())
