"""Adapting the cross-batch memory's stored embeddings: XBN, AXBN, EMA, PC-XBN, SC-XBN.

    from xbm.normalisers import NormaliserConfig, build_normaliser
    norm = build_normaliser(NormaliserConfig(kind="pcxbn"), superclass_of=None)
    adapted = norm(memory, memory_labels, batch, batch_labels, epoch=3)   # new [N, d] tensor
"""
from xbm.normalisers.base import Normaliser
from xbm.normalisers.stats import Moments
from xbm.normalisers.config import NormaliserConfig
from xbm.normalisers.registry import NORMALISERS, build_normaliser

__all__ = ["NORMALISERS", "Moments", "Normaliser", "NormaliserConfig", "build_normaliser"]
