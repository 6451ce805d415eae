"""Kind "xbn": cross-batch normalisation with the current batch's moments."""
from __future__ import annotations

from xbm.normalisers.base import Normaliser
from xbm.normalisers.stats import Moments


class XBN(Normaliser):
    """XBN (Ajanthan et al. 2023, "Adaptive Cross Batch Normalization for Metric Learning", seed 001,
    Eq. 6): the memory R [N, d] is mapped onto the moments of the current batch B [B, d],

        z' = (z - E[R]) / sigma[R] * sigma[B] + E[B]          (per dimension)

    with ``centre_only`` (thesis, seed 000, Eq. 4.5): ``z' = z - E[R] + E[B]``.
    """

    kind = "xbn"

    def target_moments(self, batch: Moments, batch_size: int) -> Moments:
        return batch
