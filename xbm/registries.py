"""Every registry of builders, as one torch-free table each: name -> where its builder lives ("module:attribute").

The same table serves the config's validation (its names; nothing imported, so ``xbm.config`` and every
``xbm-tune --help`` stay free of torch) and the builders (the attribute, imported on first use), as timm's
``register_model`` serves both ``list_models`` and ``create_model``. A name added here is accepted by the config
and built by its factory; there is no second list to keep in step.

    from xbm.registries import LOSSES
    "supcon" in LOSSES          # True, no import
    LOSSES["supcon"]            # the builder, xbm.losses.kinds.supcon (imported now)
"""
from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any


class Registry(Mapping[str, Any]):
    """A read-only mapping config value -> builder; builders are imported on first lookup."""

    def __init__(self, key: str, entries: Mapping[str, str]) -> None:
        self.key = key   # the config key whose values these are, for messages
        self._where = dict(entries)
        self._built: dict[str, Any] = {}

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, name: object) -> bool:
        return name in self._where

    def __getitem__(self, name: str) -> Any:
        if name not in self._where:
            raise KeyError(f"{self.key} must be one of {list(self._where)}, but got {name!r}")
        if name not in self._built:
            module, _, attribute = self._where[name].partition(":")
            self._built[name] = getattr(importlib.import_module(module), attribute)
        return self._built[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self._where)

    def where(self, name: str) -> str:
        """``"module:attribute"`` of ``name``'s builder."""
        return self._where[name]

    def build(self, name: str) -> Any:
        """``name``'s builder, or a ValueError naming the key and the choices (what a user's config gets)."""
        if name not in self._where:
            raise ValueError(f"{self.key} must be one of {list(self._where)}, but got {name!r}")
        return self[name]

    def __repr__(self) -> str:
        return f"Registry({self.key!r}, {self._where!r})"


_OPTIM = "xbm.training.optim"
OPTIMIZERS = Registry("optimizer", {"adamw": f"{_OPTIM}:adamw", "adam": f"{_OPTIM}:adam", "sgd": f"{_OPTIM}:sgd"})

_KINDS = "xbm.losses.kinds"
LOSSES = Registry("loss.kind", {name: f"{_KINDS}:{name}" for name in
                                ("supcon", "contrastive", "triplet", "multi_similarity", "ntxent")})
# the loss's distance; "lp" is Euclidean after L2-normalising (PML's default)
LOSS_DISTANCES = Registry("loss.distance", {"cosine": "pytorch_metric_learning.distances:CosineSimilarity",
                                            "lp": "pytorch_metric_learning.distances:LpDistance"})
# the PairMarginMiner's distance; "lp_raw": Euclidean on the embeddings as they are (no L2 normalisation)
MINER_DISTANCES = Registry("miner.distance", {"lp": "pytorch_metric_learning.distances:LpDistance",
                                              "lp_raw": "xbm.losses.criteria:raw_lp_distance",
                                              "cosine": "pytorch_metric_learning.distances:CosineSimilarity"})

# name -> builder(cfg, model, train_labels)
OBJECTIVES = Registry("objective", {name: f"xbm.objectives.registry:{name}" for name in
                                    ("supervised", "instance", "moco", "neighbours")})

_NORM = "xbm.normalisers"
NORMALISERS = Registry("normaliser.kind", {"none": f"{_NORM}.identity:Identity", "xbn": f"{_NORM}.xbn:XBN",
                                           "axbn": f"{_NORM}.axbn:AXBN", "ema": f"{_NORM}.ema:EMA",
                                           "pcxbn": f"{_NORM}.pcxbn:PerClassXBN",
                                           "scxbn": f"{_NORM}.scxbn:SuperClassXBN"})

# how the memory's rows are written (memory.update): a ring buffer, or one row per training sample
MEMORIES = Registry("memory.update", {"ring": "xbm.memory.ring:EmbeddingMemory",
                                      "indexed": "xbm.memory.indexed:IndexedMemory"})

# augment's presets (each a Preset class); the config's augment also takes "auto": the data set's own preset
_AUG = "xbm.data.augment"
AUGMENTS = Registry("augment", {"none": f"{_AUG}:NoAugment", "shift": f"{_AUG}:Shift", "metric": f"{_AUG}:Metric",
                                "randaugment": f"{_AUG}:RandAugment", "papers": f"{_AUG}:Papers"})
