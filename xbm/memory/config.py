"""The ``memory.*`` section of the training config (torch-free: ``xbm.config`` reads it, as every command does)."""
from __future__ import annotations

from dataclasses import dataclass

from xbm.checks import checker
from xbm.registries import MEMORIES

_check = checker()


@dataclass(frozen=True)
class MemoryConfig:
    """Cross-batch memory: size = ceil(ratio x training samples), used from ``start_epoch`` (0-based) on.

    ``enabled=False`` is the no-memory baseline: plain in-batch SupCon (with the miner) in every epoch, the
    other memory fields being ignored.

    ``prefill``: fill the memory with the current model's embeddings of the training set before its first step
    (XBM paper seed 002 §3.3, :mod:`xbm.training.prefill`). ``update``: ``ring`` (the newest rows, PML's
    ``CrossBatchMemory``) or ``indexed`` (one row per training sample, overwritten at the sample's index;
    :class:`xbm.memory.IndexedMemory`), which needs ``ratio`` 1.
    """

    enabled: bool = True
    ratio: float = 0.5
    start_epoch: int = 0
    batch_loss_weight: float = 0.0
    prefill: bool = False
    update: str = "ring"

    def __post_init__(self) -> None:
        _check(0.0 < self.ratio <= 1.0, "memory.ratio", "0 < ratio <= 1", self.ratio)
        _check(self.update in MEMORIES, "memory.update", f"one of {list(MEMORIES)}", self.update)
        # refused rather than resized: a sweep's config.memory.ratio column must say the size the run had
        _check(self.update != "indexed" or self.ratio == 1.0, "memory.ratio",
               "1.0 under memory.update=indexed (one row per training sample: the memory is the training set's "
               "size)", self.ratio)
        _check(self.start_epoch >= 0, "memory.start_epoch", ">= 0", self.start_epoch)
        _check(self.batch_loss_weight >= 0.0, "memory.batch_loss_weight", ">= 0", self.batch_loss_weight)
