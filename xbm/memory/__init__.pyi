# The names this package hands on, imported on first use: lazy_loader.attach_stub reads this file at run time,
# type checkers read it instead of __init__.py. One list: add a name here, nowhere else.
from .indexed import IndexedMemory as IndexedMemory
from .ring import EmbeddingMemory as EmbeddingMemory, MemoryRows as MemoryRows
