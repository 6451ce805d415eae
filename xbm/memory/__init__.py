"""The cross-batch memories (XBM paper, seed 002 §3): ``memory.update`` names which (:data:`xbm.registries.MEMORIES`).

- :class:`EmbeddingMemory` (``ring``): a preallocated fp32 ring buffer of past embeddings, detached, on the
  embeddings' device (``ring.py``);
- :class:`IndexedMemory` (``indexed``): one row per training sample, overwritten at the sample's index
  (``indexed.py``).

``config.py`` holds the ``memory.*`` section of the training config. Names are imported on first use
(``lazy_loader``, as :mod:`xbm.normalisers`): ``xbm.config`` needs only the section, and importing it must not
pull in torch.
"""
import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)   # the names: __init__.pyi
