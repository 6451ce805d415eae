"""Offline data sets in their official layouts: ``build_dataset(cfg) -> DatasetSplits``.

See docs/data.md for the contract, the layouts and the protocols. The faces are imported on first use
(``lazy_loader``, as :mod:`xbm`), so that the torch-free modules here (``inputs.py``, ``image_folder.py``) stay
torch-free: importing a submodule runs this file first.
"""
from typing import TYPE_CHECKING

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "base": ["DatasetSplits", "EvalSplit", "RawData", "SampleDataset"],
    "preprocess": ["Preprocessing"],
    "registry": ["DATASETS", "RECALL_KS", "build_dataset", "recall_ks"],
})

if TYPE_CHECKING:  # the same names, for type checkers (they do not run lazy_loader)
    from xbm.data.base import DatasetSplits, EvalSplit, RawData, SampleDataset
    from xbm.data.preprocess import Preprocessing
    from xbm.data.registry import DATASETS, RECALL_KS, build_dataset, recall_ks
