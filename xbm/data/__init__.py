"""Offline data sets in their official layouts: ``build_dataset(cfg) -> DatasetSplits``.

See docs/data.md for the contract, the layouts and the protocols. The faces are imported on first use
(``lazy_loader``, as :mod:`xbm`), so that the torch-free modules here (``inputs.py``, ``image_folder.py``) stay
torch-free: importing a submodule runs this file first.
"""
import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)   # the names: __init__.pyi
