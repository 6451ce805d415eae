# The names this package hands on, imported on first use: lazy_loader.attach_stub reads this file at run time,
# type checkers read it instead of __init__.py. One list: add a name here, nowhere else.
from .base import (
    DatasetSplits as DatasetSplits, EvalSplit as EvalSplit, RawData as RawData, SampleDataset as SampleDataset,
)
from .preprocess import Preprocessing as Preprocessing
from .registry import (
    DATASETS as DATASETS, RECALL_KS as RECALL_KS, build_dataset as build_dataset, recall_ks as recall_ks,
)
