"""The normaliser registry: one dict kind -> class, and ``build_normaliser``."""
from __future__ import annotations

from torch import Tensor

from xbm.normalisers.axbn import AXBN
from xbm.normalisers.base import Normaliser
from xbm.normalisers.config import NormaliserConfig
from xbm.normalisers.ema import EMA
from xbm.normalisers.identity import Identity
from xbm.normalisers.pcxbn import PerClassXBN
from xbm.normalisers.scxbn import SuperClassXBN
from xbm.normalisers.xbn import XBN

NORMALISERS: dict[str, type[Normaliser]] = {
    "none": Identity,
    "xbn": XBN,
    "axbn": AXBN,
    "ema": EMA,
    "pcxbn": PerClassXBN,
    "scxbn": SuperClassXBN,
}


def build_normaliser(cfg: NormaliserConfig, superclass_of: Tensor | None = None,
                     num_labels: int | None = None) -> Normaliser:
    """The normaliser of ``cfg.kind``; ``superclass_of`` (class id -> super-class id) is used by
    "scxbn", which requires it, and ignored by the other kinds. ``num_labels``: the labels the normaliser
    will see lie in [0, num_labels) (known once per data set): "scxbn" checks it against ``superclass_of``
    once, here, instead of every step; the other kinds ignore it."""
    if cfg.kind not in NORMALISERS:
        raise ValueError(f"normaliser kind must be one of {sorted(NORMALISERS)}, but got {cfg.kind!r}")
    cls = NORMALISERS[cfg.kind]
    if cls.needs_superclasses:
        return cls(cfg, superclass_of=superclass_of, num_labels=num_labels)
    return cls(cfg)
