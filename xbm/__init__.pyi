# The names this package hands on, imported on first use: lazy_loader.attach_stub reads this file at run time,
# type checkers read it instead of __init__.py. One list: add a name here, nowhere else.
from .config import TrainConfig as TrainConfig
from .evaluate.embedder import load_embedder as load_embedder
from .losses.xbm_loss import XBMLoss as XBMLoss
from .memory import EmbeddingMemory as EmbeddingMemory
from .normalisers import NormaliserConfig as NormaliserConfig, build_normaliser as build_normaliser
from .trainer import Trainer as Trainer
from .version import __version__ as __version__
