"""XBMLoss: a PML pair loss computed between the batch and a cross-batch memory, with adaptation."""
from __future__ import annotations

import numpy as np
import torch
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu
from torch import Tensor, nn

from xbm.losses.pair_masks import PairMasks, loss_from_masks, pair_masks, supports_masks
from xbm.losses.valid_negatives import valid_negatives, valid_negatives_of_pairs
from xbm.memory import EmbeddingMemory
from xbm.normalisers.base import Normaliser
from xbm.registries import MEMORIES


class XBMLoss(nn.Module):
    """Cross-batch memory loss (XBM, Wang et al. 2020, seed 002; the step order of the AXBN paper,
    seed 001 §3.1, and of PML's ``CrossBatchMemory``). Per call ``crit(embeddings, labels, epoch=e)``:

    1. adapt the stored rows (those from before this batch) with ``normaliser`` towards the detached
       batch's statistics, and write them back into the memory (later steps see the adapted memory);
    2. enqueue the batch (fp32, detached, modulo writes);
    3. mine pairs between the batch (queries) and the filled memory rows (references) with
       ``miner``, or take all pairs, and drop each sample's pair with its own stored copy;
    4. ``loss(embeddings, labels, pairs, memory, memory_labels)``; with ``batch_loss_weight`` w > 0
       add w x the plain in-batch loss with the same miner ("XBM*", seed 001 Table 2).

    ``enqueue_mask`` (MoCo, as PML's ``CrossBatchMemory``; best on the CPU, see :func:`split_rows`): rows where
    it is True are keys, only they are enqueued; the other rows are queries, mined against the memory (which
    then holds this batch's keys) with no self pair to drop, and the normaliser adapts the memory towards the
    queries' statistics (the current encoder's, which the stored keys drift away from). The in-batch term
    (w > 0) takes every row.

    With no normaliser (or kind "none") and w = 0 this is PML ``CrossBatchMemory`` (same loss and
    gradients, wrap-around included), but: the memory is an fp32 ``EmbeddingMemory`` whose pointer
    and fill are in ``state_dict``, a batch larger than the memory is allowed (its newest rows are
    kept), and fp16/bf16 embeddings are compared with the memory in fp32.

    ``update``: ``ring`` (the above) or ``indexed`` (:class:`xbm.memory.IndexedMemory`: one row per
    training sample, ``memory_size`` = the training set's size, overwritten at the sample's index; ``indices`` are
    then required).

    With our SupCon (:class:`xbm.losses.pair_masks.SupConLoss`) or PML's NT-Xent and a PairMarginMiner or none,
    steps 3-4 run on [B, N] pair masks instead of PML's index tuples (same pairs, same loss; no host read,
    see :mod:`xbm.losses.pair_masks`); other losses take PML's index path.

    After each call ``last_stats`` holds floats or 0-dim device tensors (read once per epoch, not per
    step): ``memory_pos_pairs``, ``memory_neg_pairs`` (pairs mined against the memory, self pairs
    removed), ``batch_pos_pairs``, ``batch_neg_pairs`` (pairs the same miner finds within the batch: the
    in-batch loss's own mining when w > 0, else the memory mining's pairs with this batch's rows, no
    second mining), ``loss_pos_pairs`` (positive pairs that entered the loss: the memory's, plus the
    batch's when w > 0), ``memory_fill`` (filled fraction), ``batch_loss`` (a tensor; NaN when w = 0) and
    ``adapted`` (1.0 when the normaliser changed the memory), ``valid_neg_memory`` and ``valid_neg_batch``
    (negative pairs with a non-zero gradient, :mod:`xbm.losses.valid_negatives`: in the memory loss, and among
    them those against this batch's rows; with w > 0 the in-batch loss's own; NaN for a loss it does not define).
    """

    def __init__(self, loss: nn.Module, embedding_size: int, memory_size: int, miner: nn.Module | None = None,
                 normaliser: Normaliser | None = None, batch_loss_weight: float = 0.0, update: str = "ring") -> None:
        super().__init__()
        if isinstance(batch_loss_weight, bool) or not batch_loss_weight >= 0.0:
            raise ValueError(f"batch_loss_weight must be >= 0, but got {batch_loss_weight!r}")
        self.loss = loss
        self.miner = miner
        self.normaliser = normaliser
        self.batch_loss_weight = float(batch_loss_weight)
        self.masks = supports_masks(loss, miner)   # pairs as masks: no host read (xbm.losses.pair_masks)
        self.memory: EmbeddingMemory = MEMORIES.build(update)(memory_size, embedding_size)
        self.register_buffer("iteration", torch.zeros((), dtype=torch.long))
        self.last_stats: dict[str, float | Tensor] = {}

    def forward(self, embeddings: Tensor, labels: Tensor, epoch: int = 0, indices: Tensor | None = None,
                enqueue_mask: Tensor | None = None) -> Tensor:
        if embeddings.dim() != 2 or labels.shape != embeddings.shape[:1]:
            raise ValueError(f"XBMLoss needs embeddings [B, d] and labels [B], but got "
                             f"{tuple(embeddings.shape)} and {tuple(labels.shape)}")
        labels = labels.to(embeddings.device)
        # Compare in the memory's fp32: under autocast the matmul is cast down anyway.
        rows = embeddings if embeddings.dtype == self.memory.embeddings.dtype else embeddings.float()
        queries, query_labels = rows, labels
        keys, key_labels, key_indices = rows, labels, indices
        if enqueue_mask is not None:  # MoCo: keys fill the memory, queries are compared with it
            key_at, query_at = split_rows(enqueue_mask, rows.device)
            queries, query_labels = rows.index_select(0, query_at), labels.index_select(0, query_at)
            keys, key_labels = rows.index_select(0, key_at), labels.index_select(0, key_at)
            key_indices = indices.index_select(0, key_at.to(indices.device)) if indices is not None else None
        adapted = self._adapt(queries, query_labels, epoch)
        slots = self.memory.enqueue(keys, key_labels, key_indices, iteration=self.iteration)
        self.iteration += 1
        refs, ref_labels, _, _ = self.memory.valid()
        if self.masks:
            memory_loss, memory_pos, memory_neg, in_batch_pairs = self._masked_loss(
                queries, query_labels, refs, ref_labels, slots, enqueue_mask)
            valid = valid_negatives(self.loss, self.miner, queries, refs, in_batch_pairs)
        else:
            pairs = self._pairs(queries, query_labels, refs, ref_labels)
            if enqueue_mask is None:  # queries are in the memory too: not their own positives
                pairs = _drop_self_pairs(pairs, slots)
            memory_loss = self.loss(queries, query_labels, pairs, refs, ref_labels)
            memory_pos, memory_neg = float(len(pairs[0])), float(len(pairs[2]))
            in_batch_pairs = (pairs[1], pairs[3])
            valid = valid_negatives_of_pairs(self.loss, queries, refs, pairs)
        valid_memory = valid_batch = float("nan")   # a loss without a definition (xbm.losses.valid_negatives)
        if valid is not None:
            valid_memory, valid_batch = valid.sum(), (valid & _slots_mask(slots, len(refs))).sum()
        total, batch_loss = memory_loss, float("nan")
        if self.batch_loss_weight > 0:
            in_batch, batch_pos, batch_neg, valid_batch = self._in_batch_loss(rows, labels)
            total = memory_loss + self.batch_loss_weight * in_batch
            batch_loss = in_batch.detach()   # a tensor: float() here would wait for the device
        else:
            batch_pos, batch_neg = self._batch_counts(rows, labels, in_batch_pairs, slots, enqueue_mask, len(refs))
        self.last_stats = {
            "memory_pos_pairs": memory_pos,
            "memory_neg_pairs": memory_neg,
            "batch_pos_pairs": batch_pos,
            "batch_neg_pairs": batch_neg,
            "loss_pos_pairs": memory_pos + (batch_pos if self.batch_loss_weight > 0 else 0.0),
            "valid_neg_memory": valid_memory,
            "valid_neg_batch": valid_batch,
            "memory_fill": len(self.memory) / self.memory.size,
            "batch_loss": batch_loss,
            "adapted": float(adapted),
        }
        return total

    def _masked_loss(self, queries: Tensor, labels: Tensor, refs: Tensor, ref_labels: Tensor, slots: Tensor,
                     enqueue_mask: Tensor | None):
        """Steps 3-4 on [B, N] pair masks (:mod:`xbm.losses.pair_masks`): no host read. Returns the loss, the
        positive and negative counts, and the masks' (positive, negative) pairs for ``_batch_counts``."""
        exclude = None
        if enqueue_mask is None:  # queries are in the memory too: not their own positives
            exclude = torch.zeros(len(queries), len(refs), dtype=torch.bool, device=refs.device)
            exclude[torch.arange(len(queries), device=refs.device), slots.clamp_min(0)] = slots >= 0
        masks = pair_masks(self.miner, queries, labels, refs, ref_labels, exclude)
        loss = loss_from_masks(self.loss, queries, refs, masks)
        return loss, masks.pos.sum(), masks.neg.sum(), masks

    def _in_batch_loss(self, rows: Tensor, labels: Tensor):
        """The plain in-batch loss (w > 0) with its positive and negative pair counts and valid negatives."""
        if self.masks:
            masks = pair_masks(self.miner, rows, labels)
            valid = valid_negatives(self.loss, self.miner, rows, None, masks).sum()
            return loss_from_masks(self.loss, rows, None, masks), masks.pos.sum(), masks.neg.sum(), valid
        batch_pairs = self._pairs(rows, labels)
        valid = valid_negatives_of_pairs(self.loss, rows, None, batch_pairs)
        return (self.loss(rows, labels, batch_pairs), float(len(batch_pairs[0])), float(len(batch_pairs[2])),
                float("nan") if valid is None else valid.sum())

    def _batch_counts(self, rows: Tensor, labels: Tensor, pairs, slots: Tensor,
                      enqueue_mask: Tensor | None, n_refs: int) -> tuple[Tensor | float, Tensor | float]:
        """The in-batch pair counts without a second mining (w = 0: no in-batch loss mines them). The batch's
        rows were just enqueued, so its in-batch pairs are the memory pairs whose reference is one of this
        batch's slots (its own copy already dropped): the same distances, so the same pairs the miner finds
        within the batch. Counted on the device (0-dim tensors). MoCo's queries are not in the memory: there
        the pairs of every row are counted from the labels without a miner (all pairs); a batch larger than
        the memory (not all of it stored) or MoCo with a miner is mined a second time."""
        if enqueue_mask is None and len(rows) <= self.memory.size:
            # slot -1 (an indexed memory stores only the last of a batch's rows with one index) marks nothing
            new = _slots_mask(slots, n_refs)[0]
            if isinstance(pairs, PairMasks):
                return (pairs.pos & new).sum(), (pairs.neg & new).sum()
            return new[pairs[0]].sum(), new[pairs[1]].sum()
        if self.miner is None:
            same = labels.unsqueeze(0) == labels.unsqueeze(1)
            positives = same.sum() - len(labels)          # the diagonal is not a pair
            return positives, len(labels) ** 2 - len(labels) - positives
        if self.masks:
            masks = pair_masks(self.miner, rows, labels)
            return masks.pos.sum(), masks.neg.sum()
        batch_pairs = self._pairs(rows, labels)
        return float(len(batch_pairs[0])), float(len(batch_pairs[2]))

    def _adapt(self, embeddings: Tensor, labels: Tensor, epoch: int) -> bool:
        """Step 1: adapt the rows stored before this batch and write them back."""
        if self.normaliser is None or not self.normaliser.active(epoch) or len(self.memory) < 2 or len(labels) < 2:
            return False   # (fewer than 2 rows: no standard deviation, the normaliser would not adapt)
        stored, stored_labels, _, _ = self.memory.valid()
        # In place (out=stored): a second [M, d] tensor per step would cost more than the arithmetic.
        self.normaliser(stored, stored_labels, embeddings.detach(), labels, epoch=epoch, out=stored)
        self.memory.store_adapted(stored)
        return True

    def _pairs(self, queries: Tensor, labels: Tensor, refs: Tensor | None = None,
               ref_labels: Tensor | None = None) -> tuple[Tensor, ...]:
        """(a1, p, a2, n) pair indices: the miner's, or all pairs (PML's convention: without
        references, the diagonal is not a positive pair)."""
        if self.miner is not None:
            return self.miner(queries, labels, refs, ref_labels)
        return lmu.get_all_pairs_indices(labels, ref_labels)


def split_rows(enqueue_mask: Tensor, device: torch.device) -> tuple[Tensor, Tensor]:
    """(key rows, query rows) of ``enqueue_mask``, as int64 positions on ``device``. Found on the host: the
    mask is the objective's layout, built on the CPU before the step, so this reads no device buffer. A mask
    on the device is read once (one wait); boolean indexing on the device would wait once per indexing."""
    # numpy: plainly host work, which the step's device-read detector (tests/xbm/training/test_host_syncs.py),
    # seeing only torch ops, cannot tell from device work on a CPU run
    mask = enqueue_mask.cpu().numpy().astype(bool)
    # non_blocking: a pageable copy is staged at once, no wait for the device
    return tuple(torch.from_numpy(np.flatnonzero(m)).to(device, non_blocking=True) for m in (mask, ~mask))


def _slots_mask(slots: Tensor, n_refs: int) -> Tensor:
    """[1, n_refs] bool: the memory rows this batch was written to (slot -1, a row overwritten within the
    batch, marks none). A sum, not a scatter: duplicate slots need no write order, and nothing is read."""
    hits = torch.zeros(n_refs, device=slots.device).index_add_(0, slots.clamp_min(0), (slots >= 0).float())
    return (hits > 0)[None, :]


def _drop_self_pairs(pairs: tuple[Tensor, ...], slots: Tensor) -> tuple[Tensor, ...]:
    """Remove positive pairs (a, p) where reference p is query a's own stored copy (slot[a]).

    PML's ``lmu.remove_self_comparisons`` does the same from the batch's slot range but assumes the
    batch fits in the memory; this form also holds when rows were overwritten (slot -1).
    """
    a1, p, a2, n = pairs
    keep = slots.index_select(0, a1) != p
    return a1[keep], p[keep], a2, n
