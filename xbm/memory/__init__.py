"""The cross-batch memories (XBM paper, seed 002 §3): ``memory.update`` names which (:data:`xbm.registries.MEMORIES`).

- :class:`EmbeddingMemory` (``ring``): a preallocated fp32 ring buffer of past embeddings, detached, on the
  embeddings' device (``ring.py``);
- :class:`IndexedMemory` (``indexed``): one row per training sample, overwritten at the sample's index
  (``indexed.py``).
"""
from xbm.memory.indexed import IndexedMemory
from xbm.memory.ring import EmbeddingMemory, MemoryRows

__all__ = ["EmbeddingMemory", "IndexedMemory", "MemoryRows"]
