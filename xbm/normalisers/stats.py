"""Per-dimension statistics of embedding rows: whole-set and per-group moments, in fp32 passes.

E and sigma are per-dimension means and standard deviations; sigma uses Bessel's correction
(divides by n - 1, torch's default) and is floored at ``eps``. All sums of squares are taken about
the mean (two passes), never as E[z^2] - E[z]^2, which cancels catastrophically in fp32.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import Tensor


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


@contextmanager
def deterministic_sums(device: torch.device) -> Iterator[None]:
    """Group sums in a fixed order on CUDA: its ``index_add_`` adds with atomics, in an order that differs
    from run to run and from GPU to GPU, so data-parallel ranks' memories (adapted in place from these sums)
    would drift apart by rounding. Under torch's deterministic mode, CUDA's ``index_add_`` sorts the ids and
    adds each group's rows in order (torch.use_deterministic_algorithms lists it); the CPU's already adds in
    order. The mode is torch-global, so it is set only around the sums, and restored."""
    if device.type != "cuda":
        yield
        return
    mode, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)


def group_counts(group: Tensor, n_groups: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """Rows per group [G] of the ids ``group`` [n] in [0, G), on the device, without a host read (whole
    numbers: exact in any order)."""
    counts = torch.zeros(n_groups, dtype=dtype, device=group.device)
    return counts.index_add_(0, group, torch.ones(group.shape, dtype=dtype, device=group.device))


def group_sums(x: Tensor, group: Tensor, n_groups: int, with_std: bool = True) -> GroupSums:
    """``GroupSums`` of the rows of ``x`` [n, d] with group ids ``group`` [n] in [0, G).

    Two chunked passes with ``index_add_`` (sums, then squares about the group means): no loop
    over groups, and no host synchronisation (``bincount`` on CUDA reads the largest id back). The same
    rows give the same bits on every device and run (:func:`deterministic_sums`)."""
    step = chunks(x)
    counts = group_counts(group, n_groups, x.dtype).unsqueeze(1)
    with deterministic_sums(x.device):
        sums = x.new_zeros(n_groups, x.shape[1])
        for part, ids in zip(x.split(step), group.split(step)):
            sums.index_add_(0, ids, part)
        mean = sums.div_(counts.clamp_min(1))
        if not with_std:
            return GroupSums(counts, mean, None)
        m2 = x.new_zeros(n_groups, x.shape[1])
        for part, ids in zip(x.split(step), group.split(step)):
            m2.index_add_(0, ids, (part - mean.index_select(0, ids)).square_())
    return GroupSums(counts, mean, m2)
