"""Offline data sets in their official layouts: ``build_dataset(cfg) -> DatasetSplits``.

See docs/data.md for the contract, the layouts and the protocols.
"""
from xbm.data.base import DatasetSplits, EvalSplit, RawData, SampleDataset
from xbm.data.preprocess import Preprocessing
from xbm.data.registry import DATASETS, RECALL_KS, build_dataset, recall_ks

__all__ = ["DATASETS", "DatasetSplits", "EvalSplit", "Preprocessing", "RECALL_KS", "RawData", "SampleDataset",
           "build_dataset", "recall_ks"]
