"""``memory.prefill``: the memory's warm start (XBM paper seed 002 §3.3).

XBM warms the network up for 1k iterations without the memory, then "initialize[s] the memory module by computing
the features of a set of randomly sampled training images with the warm-up model", row i holding the i-th sample's
embedding. Here the memory starts at ``memory.start_epoch`` (after the ``warmup_epochs``); just before its first
step the trainer embeds the training set with the model as it is then and calls :func:`prefill`.

Which forward: the model in eval mode on the training set's evaluation view (``Trainer._embed_training_set``),
not a train-mode pass over augmented batches. The paper does not say; the XBM code's only whole-set feature pass
(``feat_extractor``) is in eval mode, and its public trainer has no prefill at all. A train-mode pass would also
move BatchNorm's running statistics and draw augmentation randomness, so prefilling would change the model and the
run's RNG streams; the eval pass changes neither, and is what the staleness diagnostic compares stored rows with.

Which rows: all of them when the memory holds the training set (``ratio`` 1, and always under
``memory.update=indexed``); a smaller memory takes ``size`` samples drawn without replacement by a generator
seeded with the run's seed ("randomly sampled"; the first ``size`` indices would be the first classes of a data
set stored class by class). The draw uses its own generator, so the run's RNG streams are untouched.
"""
from __future__ import annotations

import torch
from torch import Tensor

from xbm.memory import EmbeddingMemory


def prefill_samples(n_train: int, size: int, seed: int) -> Tensor:
    """The training indices that fill a memory of ``size`` rows: ``min(size, n_train)`` drawn at random."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(n_train, generator=generator)[:size]


def prefill(memory: EmbeddingMemory, embeddings: Tensor, labels: Tensor, seed: int,
            iteration: int | Tensor | None = None) -> Tensor:
    """Fill an empty ``memory`` with rows of ``embeddings`` [n_train, d] (every training sample, training-set
    order) and their ``labels`` [n_train]; returns the training indices stored. A ring memory holds them in
    draw order (the next batch overwrites slot 0 first), an indexed one each at its own row."""
    if len(memory):
        raise ValueError(f"prefill needs an empty memory, but it holds {len(memory)} rows")
    if embeddings.shape[0] != labels.shape[0]:
        raise ValueError(f"prefill needs one label per embedding, but got {embeddings.shape[0]} embeddings and "
                         f"{labels.shape[0]} labels")
    samples = prefill_samples(embeddings.shape[0], memory.size, seed)
    at = samples.to(embeddings.device)
    memory.enqueue(embeddings.index_select(0, at), labels.to(embeddings.device).index_select(0, at), at, iteration)
    return samples
