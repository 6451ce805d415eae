"""Kind "scxbn": PC-XBN with super-classes as the groups."""
from __future__ import annotations

import torch
from torch import Tensor

from xbm.normalisers.config import NormaliserConfig
from xbm.normalisers.pcxbn import PerClassXBN


class SuperClassXBN(PerClassXBN):
    """SC-XBN (thesis, seed 000, Eq. 4.4): PC-XBN (Eq. 4.3) whose groups are the super-classes,
    group(z) = ``superclass_of[label(z)]``; ``superclass_of`` is a LongTensor [n_classes] mapping a
    class id to its super-class id (e.g. SOP's 12 super-classes)."""

    kind = "scxbn"
    needs_superclasses = True

    def __init__(self, cfg: NormaliserConfig, superclass_of: Tensor | None = None) -> None:
        super().__init__(cfg)
        if superclass_of is None:
            raise ValueError("normaliser kind 'scxbn' needs superclass_of (a LongTensor mapping class id "
                             "to super-class id), but got None; pass it or pick kind 'pcxbn'")
        superclass_of = torch.as_tensor(superclass_of)
        if superclass_of.dim() != 1 or superclass_of.is_floating_point() or superclass_of.numel() == 0:
            raise ValueError("superclass_of must be a non-empty 1-D integer tensor, but got dtype "
                             f"{superclass_of.dtype} and shape {tuple(superclass_of.shape)}")
        # Not persistent: it is data set metadata, not training state.
        self.register_buffer("superclass_of", superclass_of.long(), persistent=False)

    def groups(self, labels: Tensor) -> Tensor:
        n = self.superclass_of.numel()
        if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= n):
            raise ValueError(f"labels must lie in [0, {n}) to index superclass_of, but got labels in "
                             f"[{int(labels.min())}, {int(labels.max())}]")
        return self.superclass_of.to(labels.device).index_select(0, labels)
