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

    No host synchronisation: every shape is known before the call. A batch of B rows has at most B
    groups, so groups are B fixed slots: each batch row's slot is its group's first position in the
    sorted batch groups (``searchsorted``, no ``unique``), a memory row's the slot of its group, or the
    spare slot B when its group is not in the batch. Per-slot sums (``stats.group_sums``: ``index_add_`` on
    the CPU, a one-hot product on a GPU) run once over the whole memory and once over the batch, and give the
    counts that decide which slots get their own map; the whole-memory moments are pooled from the slots'
    (no extra pass). Every other slot, the spare one included, takes the fallback map (global XBN or the
    identity), and every row is written in one grouped pass. Subclasses override ``groups``.
    """

    kind = "pcxbn"
    graphable = True   # launch-bound on a GPU (about 100 kernels a call) and stateless

    def groups(self, labels: Tensor) -> Tensor:
        """Group id of each label: the class itself."""
        return labels

    def adapt(self, z: Tensor, labels: Tensor, zb: Tensor, batch_labels: Tensor, out: Tensor) -> Tensor | None:
        cfg = self.cfg
        with_std = not cfg.centre_only
        batch = moments(zb, cfg.eps)
        slot, batch_slot = _slots(self.groups(labels), self.groups(batch_labels))
        n = len(batch_labels)
        sums = group_sums(z, slot, n + 1, with_std)
        per_group = group_sums(zb, batch_slot, n + 1)
        # A group gets its own map with >= 2 rows in the batch and >= 2 in the memory (the spare slot n holds
        # no batch row, so never). Rows of the other slots keep their slot and take the fallback map: the slots'
        # own moments never mix rows of two groups, so no slot is remapped and no sum is taken twice (launches
        # are what cost on a GPU).
        own = (per_group.counts >= 2) & (sums.counts >= 2)   # [n + 1, 1]
        src, per_group = sums.moments(cfg.eps), per_group.moments(cfg.eps)
        target = Moments(torch.lerp(per_group.mean, batch.mean, cfg.lambda_mu),
                         torch.lerp(per_group.std, batch.std, cfg.lambda_sigma))
        scale, shift = affine_params(src, target)
        if cfg.absent == "global":
            fallback_scale, fallback_shift = affine_params(sums.pooled(cfg.eps), batch)
        else:
            fallback_scale, fallback_shift = 1.0, 0.0
        shift = torch.where(own, shift, fallback_shift)
        if scale is not None:
            scale = torch.where(own, scale, fallback_scale)
        grouped_affine(z, scale, shift, slot, out)
        return None if cfg.absent == "global" else own.squeeze(1).index_select(0, slot)


def _slots(group: Tensor, batch_group: Tensor) -> tuple[Tensor, Tensor]:
    """Slot in [0, B) of each batch row (its group's first position among the sorted batch groups), and of
    each memory row whose group is in the batch; B for the others."""
    ordered = batch_group.sort().values
    n = ordered.shape[0]
    pos = torch.searchsorted(ordered, group).clamp_max_(n - 1)
    return torch.where(ordered.index_select(0, pos) == group, pos, n), torch.searchsorted(ordered, batch_group)
