"""``build_normaliser``: the normaliser of a config's kind (the kinds and their classes:
:data:`xbm.registries.NORMALISERS`)."""
from __future__ import annotations

from torch import Tensor

from xbm.normalisers.base import Normaliser
from xbm.normalisers.config import NormaliserConfig
from xbm.registries import NORMALISERS


def build_normaliser(cfg: NormaliserConfig, superclass_of: Tensor | None = None,
                     num_labels: int | None = None) -> Normaliser:
    """The normaliser of ``cfg.kind``; ``superclass_of`` (class id -> super-class id) is used by
    "scxbn", which requires it, and ignored by the other kinds. ``num_labels``: the labels the normaliser
    will see lie in [0, num_labels) (known once per data set): "scxbn" checks it against ``superclass_of``
    once, here, instead of every step; the other kinds ignore it.

    Args:
        cfg: the run's ``normaliser.*`` options.
        superclass_of: class id -> super-class id (SC-XBN only).
        num_labels: the number of labels the normaliser will see (SC-XBN checks ``superclass_of`` covers them).

    Returns:
        The normaliser: called on (memory, memory labels, batch, batch labels), it returns the adapted memory.

    Raises:
        ValueError: an unknown kind, or SC-XBN without a valid ``superclass_of``.
    """
    cls = NORMALISERS.build(cfg.kind)
    if cls.needs_superclasses:
        return cls(cfg, superclass_of=superclass_of, num_labels=num_labels)
    return cls(cfg)
