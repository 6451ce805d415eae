"""The cross-batch memory: a preallocated fp32 ring buffer of past embeddings (XBM, seed 002 §3); its
index-addressed variant is :class:`xbm.memory.indexed.IndexedMemory`."""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn


class MemoryRows(NamedTuple):
    """Views of the filled rows, in slot order: row i of each is slot i of the memory."""

    embeddings: Tensor   # [n, d] fp32
    labels: Tensor       # [n] long
    indices: Tensor      # [n] long, training-set index of the sample (-1 if unknown)
    iterations: Tensor   # [n] long, iteration at which the row was written (-1 if unknown)


class EmbeddingMemory(nn.Module):
    """A ring buffer of ``size`` embeddings of dimension ``dim``.

    Buffers (all in ``state_dict``): ``embeddings`` [M, d] fp32, ``labels`` [M], ``indices`` [M],
    ``iterations`` [M] (long), ``pointer`` (next slot to write) and ``filled`` (number of filled
    slots). Writes are modulo M, so M need not be a multiple of the batch size; a batch larger than
    the memory keeps its newest M rows. Slots fill from 0 upwards, so the filled rows are always the
    first ``filled`` slots and unfilled zero slots (label 0 is a real class) are never exposed.
    Everything stored is detached and fp32 (autocast's fp16/bf16 rows are upcast), and the buffers
    follow the embeddings' device.
    """

    def __init__(self, size: int, dim: int, device: torch.device | str | None = None) -> None:
        super().__init__()
        for name, value in (("size", size), ("dim", dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"memory {name} must be an integer >= 1, but got {value!r}")
        self.register_buffer("embeddings", torch.zeros(size, dim, device=device))
        self.register_buffer("labels", torch.zeros(size, dtype=torch.long, device=device))
        self.register_buffer("indices", torch.full((size,), -1, dtype=torch.long, device=device))
        self.register_buffer("iterations", torch.full((size,), -1, dtype=torch.long, device=device))
        self.register_buffer("pointer", torch.zeros((), dtype=torch.long, device=device))
        self.register_buffer("filled", torch.zeros((), dtype=torch.long, device=device))
        # Host copies of pointer and filled: reading the buffers would make the CPU wait for the GPU
        # several times per training step. The buffers stay the checkpointed truth.
        self._pointer = 0
        self._filled = 0

    @property
    def size(self) -> int:
        return self.embeddings.shape[0]

    @property
    def dim(self) -> int:
        return self.embeddings.shape[1]

    @property
    def nbytes(self) -> int:
        """The memory's size in bytes: every buffer (embeddings M x d fp32, labels, indices, iterations M
        longs, pointer, filled), what a checkpoint and the device hold for it (``memory_bytes``)."""
        return sum(b.numel() * b.element_size() for b in self.buffers())

    def __len__(self) -> int:
        return self._filled

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._pointer, self._filled = int(self.pointer), int(self.filled)

    def enqueue(self, embeddings: Tensor, labels: Tensor, indices: Tensor | None = None,
                iteration: int | Tensor | None = None) -> Tensor:
        """Write a batch at the pointer (modulo M) and return, for each batch row, its slot, or -1
        for rows of a batch larger than the memory that were overwritten by newer rows of it."""
        if embeddings.dim() != 2 or embeddings.shape[1] != self.dim or labels.shape != embeddings.shape[:1]:
            raise ValueError(f"enqueue needs embeddings [B, {self.dim}] and labels [B], but got "
                             f"{tuple(embeddings.shape)} and {tuple(labels.shape)}")
        if indices is not None and indices.shape != labels.shape:
            raise ValueError(f"indices must have shape {tuple(labels.shape)}, but got {tuple(indices.shape)}")
        if self.embeddings.device != embeddings.device:
            self.to(embeddings.device)
        device, batch, size = embeddings.device, embeddings.shape[0], self.size
        start = self._pointer
        slots = (torch.arange(batch, device=device) + start) % size
        # Row j lands in slot (start + j) % M; of a batch longer than M only the newest M rows survive.
        kept = slice(max(0, batch - size), batch)
        with torch.no_grad():
            self.embeddings.index_copy_(0, slots[kept], embeddings[kept].detach().float())
            self.labels.index_copy_(0, slots[kept], labels[kept].detach().to(device, torch.long))
            if indices is None:
                self.indices.index_fill_(0, slots[kept], -1)
            else:
                self.indices.index_copy_(0, slots[kept], indices[kept].detach().to(device, torch.long))
            if isinstance(iteration, Tensor):   # copied as a tensor: index_fill_ would read it (.item()) and wait
                rows = slots[kept]
                self.iterations.index_copy_(0, rows, iteration.to(device, torch.long).expand(rows.shape[0]))
            else:
                self.iterations.index_fill_(0, slots[kept], -1 if iteration is None else iteration)
            self._pointer, self._filled = (start + batch) % size, min(self._filled + batch, size)
            self.pointer.fill_(self._pointer)
            self.filled.fill_(self._filled)
        if batch > size:
            slots[: batch - size] = -1
        return slots

    def valid(self) -> MemoryRows:
        """Views of the filled rows (the first ``len(self)`` slots)."""
        n = len(self)
        return MemoryRows(self.embeddings[:n], self.labels[:n], self.indices[:n], self.iterations[:n])

    def replace_valid(self, embeddings: Tensor) -> None:
        """Overwrite the filled rows with adapted ones (e.g. a normaliser's output), as the XBN
        papers do, so later steps see the adapted memory."""
        n = len(self)
        if embeddings.shape != (n, self.dim):
            raise ValueError(f"replace_valid needs [{n}, {self.dim}] (the filled rows), but got "
                             f"{tuple(embeddings.shape)}")
        with torch.no_grad():
            self.embeddings[:n].copy_(embeddings.detach())

    def store_adapted(self, rows: Tensor) -> None:
        """Keep ``rows``, the ``valid()`` embeddings adapted in place: here they are views of the memory, so
        nothing is left to do (a memory whose ``valid()`` copies writes them back)."""

    def reset(self) -> None:
        """Empty the memory."""
        with torch.no_grad():
            self.embeddings.zero_()
            self.labels.zero_()
            self.indices.fill_(-1)
            self.iterations.fill_(-1)
            self.pointer.zero_()
            self.filled.zero_()
        self._pointer = self._filled = 0

    def extra_repr(self) -> str:
        return f"size={self.size}, dim={self.dim}, filled={len(self)}"
