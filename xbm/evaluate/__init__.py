"""Retrieval evaluation: ``retrieval_metrics`` (Recall@K, MAP@R, R-precision) and ``nearest_neighbours``,
over an exact, blocked Euclidean k-NN search (``xbm.evaluate.knn``). See ``metrics.py`` for the definitions.
"""
from xbm.evaluate.knn import KNN_BACKENDS
from xbm.evaluate.metrics import RetrievalAccuracyCalculator, nearest_neighbours, retrieval_metrics

__all__ = ["KNN_BACKENDS", "RetrievalAccuracyCalculator", "nearest_neighbours", "retrieval_metrics"]
