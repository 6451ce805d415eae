"""Adapting the cross-batch memory's stored embeddings: XBN, AXBN, EMA, PC-XBN, SC-XBN.

    from xbm.normalisers import NormaliserConfig, build_normaliser
    norm = build_normaliser(NormaliserConfig(kind="pcxbn"), superclass_of=None)
    adapted = norm(memory, memory_labels, batch, batch_labels, epoch=3)   # new [N, d] tensor

Names are imported lazily: ``xbm.config`` needs only ``NormaliserConfig``, and importing it must not
pull in torch (every ``xbm-tune`` command, ``--help`` included, reads the config).
"""
from importlib import import_module

from xbm.normalisers.config import NormaliserConfig

_LAZY = {
    "Normaliser": "xbm.normalisers.base",
    "Moments": "xbm.normalisers.stats",
    "NORMALISERS": "xbm.normalisers.registry",
    "build_normaliser": "xbm.normalisers.registry",
}

__all__ = ["NORMALISERS", "Moments", "Normaliser", "NormaliserConfig", "build_normaliser"]


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'xbm.normalisers' has no attribute {name!r}")
