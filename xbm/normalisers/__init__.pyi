# The names this package hands on, imported on first use: lazy_loader.attach_stub reads this file at run time,
# type checkers read it instead of __init__.py. One list: add a name here, nowhere else.
from .base import Normaliser as Normaliser
from .config import NormaliserConfig as NormaliserConfig
from .registry import (  # NORMALISERS: xbm.registries's, re-exported
    NORMALISERS as NORMALISERS, build_normaliser as build_normaliser,
)
from .stats import Moments as Moments
