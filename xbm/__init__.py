"""xbm: cross-batch memory for deep metric learning (memory, normalisers, losses, trainer, data, models).

No Ray here. Its faces are imported on first use (``lazy_loader``), so that ``import xbm.config`` stays
torch-free and cheap; ``xbm.__version__`` too (:mod:`xbm.version`: the installed metadata's version).
"""
import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)   # the names: __init__.pyi
