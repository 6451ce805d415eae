"""xbm: cross-batch memory for deep metric learning (memory, normalisers, losses, trainer, data, models).

No Ray here. Its faces are imported on first use (``lazy_loader``), so that ``import xbm.config`` stays
torch-free and cheap; ``xbm.__version__`` too (:mod:`xbm.version`: the installed metadata's version).
"""
import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs={
    "config": ["TrainConfig"],
    "evaluate.embedder": ["load_embedder"],
    "losses.xbm_loss": ["XBMLoss"],
    "memory": ["EmbeddingMemory"],
    "normalisers": ["NormaliserConfig", "build_normaliser"],
    "trainer": ["Trainer"],
    "version": ["__version__"],
})
