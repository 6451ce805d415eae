"""Retrieval evaluation: ``retrieval_metrics`` (Recall@K, MAP@R, R-precision) and ``nearest_neighbours``,
over an exact, blocked Euclidean k-NN search (``xbm.evaluate.knn``). See ``metrics.py`` for the definitions.
``knn_accuracy``: weighted k-NN classification accuracy, as MoCo reports it (``knn_classification.py``).
"""
from xbm.evaluate.knn import KNN_BACKENDS
from xbm.evaluate.knn_classification import knn_accuracy
from xbm.evaluate.metrics import RetrievalAccuracyCalculator, nearest_neighbours, retrieval_metrics

__all__ = [
    "KNN_BACKENDS", "RetrievalAccuracyCalculator", "knn_accuracy", "nearest_neighbours", "retrieval_metrics",
]
