"""Kind "none": plain XBM, the stored embeddings are used as they are."""
from __future__ import annotations

from xbm.normalisers.base import Normaliser


class Identity(Normaliser):
    """XBM (Wang et al. 2020, "Cross-Batch Memory for Embedding Learning", seed 002): no adaptation,
    ``z' = z``. ``forward`` returns an unchanged copy of the memory."""

    kind = "none"

    def active(self, epoch: int) -> bool:
        return False
