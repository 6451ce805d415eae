"""``memory.update=indexed``: the cross-batch memory with one row per training sample (XBM paper seed 002 §3.3)."""
from __future__ import annotations

import torch
from torch import Tensor

from xbm.memory.ring import EmbeddingMemory, MemoryRows


class IndexedMemory(EmbeddingMemory):
    """One row per training sample: row i holds sample i's newest embedding (``memory.update=indexed``; the
    XBM paper seed 002 §3.3 initialises row i with "the embedding of the i-th sample", and overwriting it in
    place keeps one copy per sample, as ``feats[indices] = batch`` would). ``size`` = the training set's size.

    A ``written`` buffer [M] bool (in ``state_dict``) is the fill mask: rows never written are not references.
    ``valid()`` returns the written rows in row order; ``enqueue`` returns each batch row's position among them
    (its row once the memory is full), or -1 for a row whose index occurs again later in the batch (two views
    of one image): the later row is stored, as a ring stores the newest. Until every row is written, each
    ``enqueue`` finds the written rows on the device (one wait per step; kept until the next write) and ``valid()``
    gathers a copy of them; a full memory (``memory.prefill``, or after a pass over the data) never reads the
    device and ``valid()`` returns views.
    ``pointer`` stays 0: nothing is written in order.
    """

    def __init__(self, size: int, dim: int, device: torch.device | str | None = None) -> None:
        super().__init__(size, dim, device)
        self.register_buffer("written", torch.zeros(size, dtype=torch.bool, device=device))
        self._rows: Tensor | None = None   # the written rows while not full, found once per write (a device read)

    def enqueue(self, embeddings: Tensor, labels: Tensor, indices: Tensor | None = None,
                iteration: int | Tensor | None = None) -> Tensor:
        """Write batch row j at row ``indices[j]``; return its position in ``valid()`` (-1: a later batch row
        has the same index)."""
        if indices is None or indices.shape != labels.shape or embeddings.shape != (len(labels), self.dim):
            raise ValueError(f"an indexed memory needs embeddings [B, {self.dim}], labels [B] and the samples' "
                             f"indices [B], but got {tuple(embeddings.shape)}, {tuple(labels.shape)} and "
                             f"{None if indices is None else tuple(indices.shape)}")
        if self.embeddings.device != embeddings.device:
            self.to(embeddings.device)
        device, batch = embeddings.device, embeddings.shape[0]
        rows = indices.detach().to(device, torch.long)
        order = torch.arange(batch, device=device)
        # the last batch row of each index: every duplicate writes that row's values, so the write is
        # deterministic whatever order index_copy_ applies duplicates in (CUDA promises none)
        last = torch.full((self.size,), -1, dtype=torch.long, device=device).scatter_reduce_(0, rows, order, "amax")
        source = last.index_select(0, rows)
        with torch.no_grad():
            self.embeddings.index_copy_(0, rows, embeddings.detach().float().index_select(0, source))
            self.labels.index_copy_(0, rows, labels.detach().to(device, torch.long).index_select(0, source))
            self.indices.index_copy_(0, rows, rows)
            if isinstance(iteration, Tensor):   # as a tensor: index_fill_ would read it (.item()) and wait
                self.iterations.index_copy_(0, rows, iteration.to(device, torch.long).expand(batch))
            else:
                self.iterations.index_fill_(0, rows, -1 if iteration is None else iteration)
            self.written.index_fill_(0, rows, True)
            positions = rows
            if self._filled < self.size:   # rows not yet written are left out of valid(): find them
                self._rows = None
                self._filled = len(self._written_rows())
                self.filled.fill_(self._filled)
                positions = (self.written.cumsum(0) - 1).index_select(0, rows)
        return torch.where(source == order, positions, torch.full_like(positions, -1))

    def _written_rows(self) -> Tensor:
        if self._rows is None or self._rows.device != self.written.device:   # (moved by .to(): found again)
            self._rows = self.written.nonzero().squeeze(1)
        return self._rows

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._rows = None

    def valid(self) -> MemoryRows:
        """The written rows in row order: views when the memory is full, else a gathered copy."""
        if self._filled == self.size:
            return super().valid()
        at = self._written_rows()
        return MemoryRows(*(buffer.index_select(0, at) for buffer in
                            (self.embeddings, self.labels, self.indices, self.iterations)))

    def replace_valid(self, embeddings: Tensor) -> None:
        if self._filled == self.size:
            return super().replace_valid(embeddings)
        if embeddings.shape != (len(self), self.dim):
            raise ValueError(f"replace_valid needs [{len(self)}, {self.dim}] (the written rows), but got "
                             f"{tuple(embeddings.shape)}")
        with torch.no_grad():
            self.embeddings.index_copy_(0, self._written_rows(), embeddings.detach().float())

    def store_adapted(self, rows: Tensor) -> None:
        if self._filled < self.size:   # valid() gave a copy: write it back
            self.replace_valid(rows)

    def reset(self) -> None:
        super().reset()
        self.written.zero_()
        self._rows = None
