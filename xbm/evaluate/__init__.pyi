# The names this package hands on, imported on first use: lazy_loader.attach_stub reads this file at run time,
# type checkers read it instead of __init__.py. One list: add a name here, nowhere else.
from .knn import KNN_BACKENDS as KNN_BACKENDS
from .knn_classification import knn_accuracy as knn_accuracy
from .metrics import (
    RetrievalAccuracyCalculator as RetrievalAccuracyCalculator, nearest_neighbours as nearest_neighbours,
    retrieval_metrics as retrieval_metrics,
)
