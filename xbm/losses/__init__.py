"""The loss: the ``loss.kind`` pair losses (PML's), their miners, the in-batch and cross-batch criteria, and
pairs as dense masks."""
