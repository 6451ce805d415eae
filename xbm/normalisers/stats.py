"""Per-dimension statistics of embedding rows: whole-set and per-group moments, in fp32 passes.

E and sigma are per-dimension means and standard deviations; sigma uses Bessel's correction
(divides by n - 1, torch's default) and is floored at ``eps``. All sums of squares are taken about
the mean (two passes), never as E[z^2] - E[z]^2, which cancels catastrophically in fp32.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

from xbm.runtime.precision import full_fp32_matmul

DENSE_ELEMENTS = 2**25  # one one-hot block of the dense group sums, groups x rows (128 MiB in fp32)


def chunks(x: Tensor) -> int:
    """Rows per chunk for passes that need temporaries. On CPU ~1 MB chunks stay in cache and avoid
    allocating (and page-faulting) [N, d] temporaries, which costs more than the arithmetic; on GPU
    one chunk (the caching allocator makes temporaries free, and launches are what cost)."""
    return x.shape[0] if x.is_cuda else max(1, 2**18 // max(1, x.shape[1]))


@dataclass(frozen=True)
class Moments:
    """Per-dimension mean and standard deviation, shape [d] (global) or [G, d] (per group).

    ``std`` is None when it is not needed (the memory's moments under ``centre_only``).
    """

    mean: Tensor
    std: Tensor | None


def moments(x: Tensor, eps: float, with_std: bool = True) -> Moments:
    """Mean and Bessel-corrected std (floored at eps) over the rows of ``x`` [n, d], n >= 2.

    Two chunked passes (mean, then centred squares): as accurate as ``torch.var_mean`` and, on CPU,
    several times faster for a tall [60,000, 512] memory."""
    n = x.shape[0]
    mean = x.sum(dim=0).div_(n)
    if not with_std:
        return Moments(mean, None)
    m2 = x.new_zeros(x.shape[1])
    for part in x.split(chunks(x)):
        m2 += (part - mean).square_().sum(dim=0)
    return Moments(mean, m2.div_(n - 1).sqrt_().clamp_min_(eps))


@dataclass(frozen=True)
class GroupSums:
    """Per-group row counts [G, 1], means [G, d] and sums of squares about the group mean [G, d]
    (``m2``; None when no std is needed)."""

    counts: Tensor
    mean: Tensor
    m2: Tensor | None

    def moments(self, eps: float) -> Moments:
        """Each group's moments; groups with fewer than 2 rows get harmless, unused values."""
        if self.m2 is None:
            return Moments(self.mean, None)
        return Moments(self.mean, (self.m2 / (self.counts - 1).clamp_min(1)).sqrt_().clamp_min_(eps))

    def pooled(self, eps: float) -> Moments:
        """Moments of all the groups' rows together, by the exact parallel combination of Chan,
        Golub and LeVeque (1979): M2 = sum_g M2_g + sum_g n_g (E_g - E)^2 (no extra pass)."""
        n = self.counts.sum()
        mean = (self.counts * self.mean).sum(dim=0) / n
        if self.m2 is None:
            return Moments(mean, None)
        m2 = self.m2.sum(dim=0) + (self.counts * (self.mean - mean).square()).sum(dim=0)
        return Moments(mean, (m2 / (n - 1)).sqrt_().clamp_min_(eps))


def uses_dense_sums(device: torch.device) -> bool:
    """Whether group sums on ``device`` take the one-hot product (:func:`group_sums`): everywhere but the CPU."""
    return device.type != "cpu"


def group_counts(group: Tensor, n_groups: int, dtype: torch.dtype = torch.float32,
                 dense: Optional[bool] = None, hot: Optional[Tensor] = None) -> Tensor:
    """Rows per group [G] of the ids ``group`` [n] in [0, G), on the device, without a host read (whole
    numbers: exact in any order). ``hot``: the one-hot matrix of ``group`` when already built
    (:func:`one_hot_once`), summed by row. Otherwise ``dense`` (default: off the CPU) counts with one-hot row
    sums, block by block, instead of ``index_add_``, whose atomics on one address serialise on a GPU (PC-XBN's
    spare slot holds almost every memory row)."""
    if hot is not None:
        return hot.sum(dim=1, dtype=dtype)
    counts = torch.zeros(n_groups, dtype=dtype, device=group.device)
    if not (uses_dense_sums(group.device) if dense is None else dense):
        return counts.index_add_(0, group, torch.ones(group.shape, dtype=dtype, device=group.device))
    for ids in group.split(_dense_rows(n_groups, group.shape[0])):
        counts += _one_hot(ids, n_groups).sum(dim=1, dtype=dtype)
    return counts


def _one_hot(ids: Tensor, n_groups: int) -> Tensor:
    """The [G, n] bool matrix, True at (ids[j], j): as floats, ``one_hot @ x`` sums the rows of ``x`` by group."""
    return ids.unsqueeze(0) == torch.arange(n_groups, device=ids.device).unsqueeze(1)


def one_hot_once(group: Tensor, n_groups: int, dtype: torch.dtype) -> Optional[Tensor]:
    """The [G, n] one-hot matrix of ``group`` as ``dtype``, built once for every pass over the same groups
    (counts, sums, squares), when it fits one block of :data:`DENSE_ELEMENTS`; None when it does not (each
    pass then builds its blocks). On an H100 PC-XBN was bound by its launches, not its arithmetic (1.1 ms of
    GPU time in 2.96 ms, 2026-11-26): each one-hot built again cost 5 launches and a [G, n] write."""
    if _dense_rows(n_groups, group.shape[0]) < group.shape[0]:
        return None
    return _one_hot(group, n_groups).to(dtype)


def _dense_rows(n_groups: int, n: int) -> int:
    """Rows per one-hot chunk: a [G, rows] block of at most :data:`DENSE_ELEMENTS`."""
    return max(1, min(n, DENSE_ELEMENTS // max(1, n_groups)))


def _add_by_group(out: Tensor, x: Tensor, group: Tensor, term: Callable[[Tensor, Tensor], Tensor],
                  dense: bool, hot: Optional[Tensor] = None) -> Tensor:
    """``out[g] += sum of term(rows, their ids) over the rows of x in group g``, in a fixed order (below);
    ``hot``: the one-hot matrix of all of ``group`` (:func:`one_hot_once`), if built."""
    if not dense:   # the CPU's index_add_ adds the rows one after another, in index order
        step = chunks(x)
        for part, ids in zip(x.split(step), group.split(step)):
            out.index_add_(0, ids, term(part, ids))
        return out
    # A GEMM reduces in an order fixed by its shapes, never by the data, and no atomics; full fp32 (TF32
    # would round x to 10 bits) and outside autocast (which would take the product to bf16).
    plain = torch.amp.is_autocast_available(x.device.type)   # not on "meta", the tests' stand-in GPU
    with full_fp32_matmul(), torch.autocast(x.device.type, enabled=False) if plain else nullcontext():
        if hot is not None:
            return out.addmm_(hot, term(x, group))
        step = _dense_rows(out.shape[0], x.shape[0])
        for part, ids in zip(x.split(step), group.split(step)):
            out.addmm_(_one_hot(ids, out.shape[0]).to(x.dtype), term(part, ids))
    return out


def sum_by_group(x: Tensor, group: Tensor, n_groups: int, dense: Optional[bool] = None,
                 hot: Optional[Tensor] = None) -> Tensor:
    """Row sums [G, d] of ``x`` [n, d] by group id ``group`` [n] in [0, G), the same bits on every run: the
    first pass of :func:`group_sums` (its ``dense`` rule; ``hot``: the one-hot matrix, if built). Also k-means'
    centroid step for ``nmi`` (:mod:`xbm.evaluate.kmeans`), where G is the number of classes."""
    dense = uses_dense_sums(x.device) if dense is None else dense
    return _add_by_group(x.new_zeros(n_groups, x.shape[1]), x, group, lambda part, ids: part, dense, hot)


def group_sums(x: Tensor, group: Tensor, n_groups: int, with_std: bool = True,
               dense: Optional[bool] = None) -> GroupSums:
    """``GroupSums`` of the rows of ``x`` [n, d] with group ids ``group`` [n] in [0, G).

    Two passes (sums, then squares about the group means), no loop over groups, no host synchronisation
    (``bincount`` on CUDA reads the largest id back), and the same bits on every run and rank:

    - on the CPU (``dense`` False, the default there) ``index_add_``, chunked, which adds in index order;
    - elsewhere (``dense`` True) the product of the one-hot matrix [G, n] with the rows [n, d]. CUDA's
      ``index_add_`` adds with atomics in no fixed order, so ranks' memories, adapted in place from these
      sums, drift apart; torch's deterministic mode fixes the order but walks each group's rows in one
      warp, so PC-XBN's spare slot (almost every memory row) cost 146x XBN on an H100. The product costs
      G n d multiply-adds whatever the groups' sizes (PC-XBN's B + 1 = 65 slots x 60,000 x 512: 4 GFLOP,
      a fraction of a millisecond), so it is meant for few groups, as PC-XBN's B + 1 slots are."""
    dense = uses_dense_sums(x.device) if dense is None else dense
    hot = one_hot_once(group, n_groups, x.dtype) if dense else None
    counts = group_counts(group, n_groups, x.dtype, dense, hot).unsqueeze(1)
    mean = sum_by_group(x, group, n_groups, dense, hot).div_(counts.clamp_min(1))
    if not with_std:
        return GroupSums(counts, mean, None)
    m2 = _add_by_group(x.new_zeros(n_groups, x.shape[1]), x, group,
                       lambda part, ids: (part - mean.index_select(0, ids)).square_(), dense, hot)
    return GroupSums(counts, mean, m2)
