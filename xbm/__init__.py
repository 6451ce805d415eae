"""xbm: cross-batch memory for deep metric learning (memory, normalisers, trainer, data, models).

No Ray here. Public names are imported lazily so that ``import xbm.config`` stays cheap.
"""
from importlib import import_module

_PUBLIC = {
    "NormaliserConfig": "xbm.normalisers",
    "build_normaliser": "xbm.normalisers",
    "XBMLoss": "xbm.loss",
    "EmbeddingMemory": "xbm.memory",
    "TrainConfig": "xbm.config",
    "Trainer": "xbm.trainer",
    "load_embedder": "xbm.embedder",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        return getattr(import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'xbm' has no attribute {name!r}")
