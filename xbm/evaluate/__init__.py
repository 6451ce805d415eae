"""Retrieval evaluation: ``retrieval_metrics`` (Recall@K, MAP@R, R-precision) and ``nearest_neighbours``,
over an exact, blocked Euclidean k-NN search (``xbm.evaluate.knn``). See ``metrics.py`` for the definitions.
``knn_accuracy``: weighted k-NN classification accuracy, as MoCo reports it (``knn_classification.py``).
Also the per-epoch evaluation (``epoch.py``), the diagnostics, a trial's health signals (``signals.py``, torch-free)
and an exported model's ``load_embedder`` (``embedder.py``).

The faces are imported on first use (``lazy_loader``, as :mod:`xbm`), so that ``xbm.evaluate.signals`` stays
torch-free: importing a submodule runs this file first.
"""
import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)   # the names: __init__.pyi
