"""Kind "pcxbn": XBN with per-class source and blended target moments."""
from __future__ import annotations

import torch
from torch import Tensor

from xbm.normalisers.base import Normaliser, affine_params, grouped_affine
from xbm.normalisers.stats import Moments, group_sums, moments


class PerClassXBN(Normaliser):
    """PC-XBN (thesis, seed 000, Eq. 4.3 and Algorithm 2). For every group i (here: class) with at
    least 2 rows in the memory R and at least 2 rows in the batch B, its memory rows R_i become

        z' = (z - E[R_i]) / sigma[R_i] * (l_s sigma[B] + (1 - l_s) sigma[B_i])
                                         + (l_m E[B] + (1 - l_m) E[B_i])

    with l_m = ``lambda_mu``, l_s = ``lambda_sigma`` (centre_only, Eq. 4.5:
    z' = z - E[R_i] + l_m E[B] + (1 - l_m) E[B_i]). Every other row gets the XBN transform with
    whole-memory and whole-batch moments when ``absent == "global"``, and is untouched when
    ``absent == "skip"`` (and then not L2-normalised by ``unit_norm`` either).

    Per-group moments use ``index_add_`` (no loop over classes). When the adapted groups hold few
    rows (classes) their rows are gathered; when they hold most rows (super-classes) the sums run
    over the whole memory with the other rows in a spare group, and the whole-memory moments are
    pooled from the groups' (no extra pass). A last group holds the fallback map (global XBN or
    the identity), so every row is written in one grouped pass. Subclasses override ``groups``.
    """

    kind = "pcxbn"

    def groups(self, labels: Tensor) -> Tensor:
        """Group id of each label: the class itself."""
        return labels

    def adapt(self, z: Tensor, labels: Tensor, zb: Tensor, batch_labels: Tensor, out: Tensor) -> Tensor | None:
        cfg = self.cfg
        with_std = not cfg.centre_only
        batch = moments(zb, cfg.eps)
        group, batch_group = self.groups(labels), self.groups(batch_labels)
        # Candidate groups have >= 2 batch rows; sorted, so searchsorted maps a group id to its slot.
        candidates, batch_counts = torch.unique(batch_group, return_counts=True)
        candidates = candidates[batch_counts >= 2]
        n = len(candidates)
        slot = _slots(group, candidates)
        if n:   # keep groups with >= 2 memory rows; the others fall back
            enough = torch.bincount(slot + 1, minlength=n + 1)[1:] >= 2
            slot = torch.where((slot >= 0) & enough[slot.clamp_min(0)], slot, -1)
        member = slot >= 0
        whole = None
        if 4 * int(member.sum()) >= z.shape[0]:
            sums = group_sums(z, torch.where(member, slot, n), n + 1, with_std)
            src = sums.moments(cfg.eps)
            whole = sums.pooled(cfg.eps)
        else:
            rows = member.nonzero().squeeze(1)
            src = group_sums(z.index_select(0, rows), slot.index_select(0, rows), n, with_std).moments(cfg.eps)
        batch_slot = _slots(batch_group, candidates)
        rows = (batch_slot >= 0).nonzero().squeeze(1)
        per_group = group_sums(zb.index_select(0, rows), batch_slot.index_select(0, rows), n).moments(cfg.eps)
        target = Moments(
            torch.lerp(per_group.mean, batch.mean.expand_as(per_group.mean), cfg.lambda_mu),
            torch.lerp(per_group.std, batch.std.expand_as(per_group.std), cfg.lambda_sigma),
        )
        scale, shift = affine_params(Moments(src.mean[:n], None if src.std is None else src.std[:n]), target)
        # Group n: the fallback for rows without per-group moments (global XBN, or the identity).
        if cfg.absent == "global":
            whole = whole if whole is not None else moments(z, cfg.eps, with_std)
            fallback_scale, fallback_shift = affine_params(whole, batch)
        else:
            fallback_scale = torch.ones_like(batch.std) if with_std else None
            fallback_shift = torch.zeros_like(batch.mean)
        shift = torch.cat([shift, fallback_shift.unsqueeze(0)])
        if scale is not None:
            scale = torch.cat([scale, fallback_scale.unsqueeze(0)])
        grouped_affine(z, scale, shift, torch.where(member, slot, n), out)
        return None if cfg.absent == "global" else member


def _slots(group: Tensor, candidates: Tensor) -> Tensor:
    """Index of each row's group in the sorted ``candidates``, or -1 when it is not one of them."""
    if len(candidates) == 0:
        return torch.full_like(group, -1)
    pos = torch.searchsorted(candidates, group).clamp_max_(len(candidates) - 1)
    return torch.where(candidates[pos] == group, pos, -1)
