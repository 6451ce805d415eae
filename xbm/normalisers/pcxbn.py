"""Kind "pcxbn": XBN with per-class source and blended target moments."""
from __future__ import annotations

import torch
from torch import Tensor

from xbm.normalisers.base import Normaliser, affine_params, grouped_affine
from xbm.normalisers.config import NormaliserConfig
from xbm.normalisers.stats import Moments, group_counts, group_sums, moments


class PerClassXBN(Normaliser):
    """PC-XBN (thesis, seed 000, Eq. 4.3 and Algorithm 2). For every group i (here: class) with at
    least 2 rows in the memory R and at least 2 rows in the batch B, its memory rows R_i become

        z' = (z - E[R_i]) / sigma[R_i] * (l_s sigma[B] + (1 - l_s) sigma[B_i])
                                         + (l_m E[B] + (1 - l_m) E[B_i])

    with l_m = ``lambda_mu``, l_s = ``lambda_sigma`` (centre_only, Eq. 4.5:
    z' = z - E[R_i] + l_m E[B] + (1 - l_m) E[B_i]). Every other row gets the XBN transform with
    whole-memory and whole-batch moments when ``absent == "global"``, and is untouched when
    ``absent == "skip"`` (and then not L2-normalised by ``unit_norm`` either).

    No host synchronisation: every tensor has a shape known before the call. Groups are G fixed slots,
    G = ``num_labels`` when the labels are known to lie in [0, num_labels) (the trainer passes the data
    set's bound, checked once), else the rows' labels ranked densely (G = N + B, a sort). Per-group sums
    run with ``index_add_`` over the whole memory, rows without their own map in a spare group G, so the
    whole-memory moments are pooled from the groups' (no extra pass); the spare group then holds the
    fallback map (global XBN or the identity) and every row is written in one grouped pass. Subclasses
    override ``group_ids``.
    """

    kind = "pcxbn"
    needs_num_labels = True

    def __init__(self, cfg: NormaliserConfig, num_labels: int | None = None) -> None:
        super().__init__(cfg)
        if num_labels is not None and (isinstance(num_labels, bool) or not isinstance(num_labels, int)
                                       or num_labels < 1):
            raise ValueError(f"num_labels must be an integer >= 1 (labels lie in [0, num_labels)), but got "
                             f"{num_labels!r}")
        self.num_labels = num_labels

    def group_ids(self, labels: Tensor, batch_labels: Tensor) -> tuple[Tensor, Tensor, int]:
        """Group id in [0, G) of each memory and batch row, and G."""
        if self.num_labels is not None:
            return labels, batch_labels, self.num_labels
        return _dense_ranks(labels, batch_labels)

    def adapt(self, z: Tensor, labels: Tensor, zb: Tensor, batch_labels: Tensor, out: Tensor) -> Tensor | None:
        cfg = self.cfg
        with_std = not cfg.centre_only
        batch = moments(zb, cfg.eps)
        group, batch_group, n = self.group_ids(labels, batch_labels)
        # A group gets its own map with >= 2 rows in the batch and >= 2 in the memory; slot n: the fallback.
        own = (group_counts(batch_group, n) >= 2) & (group_counts(group, n) >= 2)
        slot = torch.where(own.index_select(0, group), group, n)
        batch_slot = torch.where(own.index_select(0, batch_group), batch_group, n)
        sums = group_sums(z, slot, n + 1, with_std)
        src = sums.moments(cfg.eps)
        per_group = group_sums(zb, batch_slot, n + 1).moments(cfg.eps)
        target = Moments(
            torch.lerp(per_group.mean[:n], batch.mean.expand(n, -1), cfg.lambda_mu),
            torch.lerp(per_group.std[:n], batch.std.expand(n, -1), cfg.lambda_sigma),
        )
        scale, shift = affine_params(Moments(src.mean[:n], None if src.std is None else src.std[:n]), target)
        if cfg.absent == "global":
            fallback_scale, fallback_shift = affine_params(sums.pooled(cfg.eps), batch)
        else:
            fallback_scale = torch.ones_like(batch.std) if with_std else None
            fallback_shift = torch.zeros_like(batch.mean)
        shift = torch.cat([shift, fallback_shift.unsqueeze(0)])
        if scale is not None:
            scale = torch.cat([scale, fallback_scale.unsqueeze(0)])
        grouped_affine(z, scale, shift, slot, out)
        return None if cfg.absent == "global" else slot < n


def _dense_ranks(labels: Tensor, batch_labels: Tensor) -> tuple[Tensor, Tensor, int]:
    """Equal labels -> equal ids in [0, N + B), by one sort of both label vectors (no ``unique``, whose
    output size the host would have to read)."""
    both = torch.cat([labels, batch_labels])
    ordered, order = both.sort()
    starts = torch.ones_like(ordered)
    starts[1:] = (ordered[1:] != ordered[:-1]).to(starts.dtype)
    ranks = torch.empty_like(ordered).scatter_(0, order, starts.cumsum(0) - 1)
    n = labels.shape[0]
    return ranks[:n], ranks[n:], both.shape[0]
