"""Adapting the cross-batch memory's stored embeddings: XBN, AXBN, EMA, PC-XBN, SC-XBN.

    from xbm.normalisers import NormaliserConfig, build_normaliser
    norm = build_normaliser(NormaliserConfig(kind="pcxbn"), superclass_of=None)
    adapted = norm(memory, memory_labels, batch, batch_labels, epoch=3)   # new [N, d] tensor

Names are imported on first use (``lazy_loader``): ``xbm.config`` needs only ``NormaliserConfig``, and
importing it must not pull in torch (every ``xbm-tune`` command, ``--help`` included, reads the config).
"""
import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)   # the names: __init__.pyi
