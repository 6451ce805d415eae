"""Per-epoch evaluation and diagnostics, as flat metric dicts (names: docs/ARCHITECTURE.md).

- Retrieval on an :class:`~xbm.data.EvalSplit` (``retrieval_metrics``: Recall@K for the run's K set, the data
  set's papers' unless ``eval_ks`` says otherwise, MAP@R, R-precision),
  plus the distance diagnostics on the same embeddings (``embedding_spread``: mean distance over all
  pairs, near 0 when the embedding collapses; ``inter_distance_mean``: over pairs of different classes;
  ``intra_distance_mean``: to the class mean), ``nmi`` (k-means with as many clusters as classes) and, when
  super-classes exist, ``superclass_top_1`` .. ``_5`` (true super-class among the k nearest super-class
  means, thesis Table 5.16) and ``superclass_neighbour_share`` (of the 10 nearest neighbours); where the
  split has one-shot episodes (:mod:`xbm.data.episodes`), ``oneshot_error`` (percent) and ``oneshot_way``
  from the same query embeddings.
- References computed once, before training (:func:`references`): Recall@1 of the untrained model and
  of nearest neighbours on the raw inputs. A trained model below them is broken, not a finding.
- ``knn_accuracy`` for label-free objectives (:func:`knn`): weighted 20-NN classification of the split's
  queries with the training set as the bank (MoCo's monitor; seed 001 App. B, Fig. 2); NaN, with nothing
  embedded, when the split shares no class with training (class-disjoint metric-learning splits).
- Feature drift (seed 002 Fig. 3, seed 000 §5.4) on a fixed probe of training samples:
  ``||z_k - z_{k-1}||`` per sample between consecutive epochs, mean and max; NaN at the first epoch.
- Memory staleness (seed 001 Appendix C) on the memory rows of the drift probe's samples (at least 64 rows,
  made up with rows drawn at random): distance between the stored row and the current embedding of the same
  training sample. Probes are embedded in eval mode with the eval transform, so staleness also contains the
  augmentation the stored (training-mode) rows saw.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch
from torch import nn

from xbm.evaluate import diagnostics
from xbm.data import EvalSplit
from xbm.evaluate import knn_accuracy, retrieval_metrics
from xbm.evaluate.metrics import nmi
from xbm.evaluate.oneshot import episodes_error
from xbm.memory import EmbeddingMemory
from xbm.training.loaders import Embedder

KNN_K, KNN_TEMPERATURE = 20, 0.1  # the k = 20; MoCo's CIFAR demo's temperature
PROBE_SIZE = 256
STALENESS_LEAST_ROWS = 64  # staleness_mean's rows at the least (the probe's, then drawn)
SUPERCLASS_KS = (1, 2, 3, 4, 5)  # superclass_top_1 .. _5 (thesis Table 5.16)
NAN = math.nan


def evaluate_split(model: nn.Module, split: EvalSplit, embed: Embedder, superclass_of: Optional[torch.Tensor],
                   ks: tuple[int, ...], with_diagnostics: bool = True, with_nmi: bool = True) -> dict[str, float]:
    """Retrieval metrics of ``split`` (query vs gallery, or leave-one-out; ``recall_at_K`` for each K of ``ks``;
    a K beyond the gallery counts the whole gallery) and, with ``with_diagnostics``, the distance diagnostics
    of its embeddings (query and gallery together), the super-class measures and (``with_nmi``) ``nmi``."""
    query, query_labels = embed(model, split.query)
    gallery, gallery_labels = embed(model, split.gallery) if split.gallery is not None else (None, None)
    # One k-NN search serves Recall@K, MAP@R and the super-class top-k proportion.
    metrics = retrieval_metrics(query, query_labels, gallery, gallery_labels, ks=ks,
                                superclass_of=superclass_of if with_diagnostics else None)
    if split.episodes is not None:   # the one-shot episodes are drawings of the query set: no second pass
        metrics.update(episodes_error(query, split.episodes))
    if not with_diagnostics:
        return metrics
    every = query if gallery is None else torch.cat([query, gallery])
    every_labels = query_labels if gallery is None else torch.cat([query_labels, gallery_labels])
    metrics["embedding_spread"], metrics["inter_distance_mean"] = diagnostics.mean_distances(every, every_labels)
    metrics["intra_distance_mean"] = float(diagnostics.mean_intra_distance(every, every_labels))
    if with_nmi:
        metrics["nmi"] = nmi(every, every_labels)
    if superclass_of is not None:
        metrics.update(diagnostics.superclass_mean_top_k(query, query_labels, superclass_of, SUPERCLASS_KS,
                                                         gallery=gallery, gallery_labels=gallery_labels))
    return metrics


def knn(model: nn.Module, split: EvalSplit, train_view, embed: Embedder,
        bank: Optional[Callable[[], tuple[torch.Tensor, torch.Tensor]]] = None) -> dict[str, float]:
    """``knn_accuracy`` of ``split``'s queries against every training sample (eval transform). ``bank()``
    gives the training set's embeddings and labels (default: embeds them), so that several splits evaluated
    in one epoch share one embedding of the training set."""
    shared = torch.isin(split.query.labels, train_view.labels)
    if not bool(shared.any()):
        return {"knn_accuracy": NAN}
    bank_rows, bank_labels = bank() if bank is not None else embed(model, train_view)
    query, query_labels = embed(model, split.query)
    return {"knn_accuracy": knn_accuracy(query, query_labels, bank_rows, bank_labels, KNN_K, KNN_TEMPERATURE)}


# Raw-input neighbours search N x D floats: above this many, images are average-pooled to fit (documented).
RAW_ELEMENTS = 2**27


class RawInputs(nn.Module):
    """The "model" of the raw-pixel reference: the eval-transformed input, flattened, average-pooled first
    when ``n`` samples of it would exceed :data:`RAW_ELEMENTS` floats."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.max_dim = max(RAW_ELEMENTS // max(n, 1), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 4 and x[0].numel() > self.max_dim:
            side = max(int(math.sqrt(self.max_dim / x.shape[1])), 1)
            x = torch.nn.functional.adaptive_avg_pool2d(x.float(), side)
        return x.reshape(len(x), -1).float()


def references(model: nn.Module, split: EvalSplit, embed: Embedder) -> dict[str, float]:
    """``reference_untrained_recall_at_1`` (``model`` as it is now, before any training) and
    ``reference_raw_recall_at_1`` (nearest neighbours on the flattened eval-transformed inputs) of
    ``split``, the split ``recall_at_1`` is measured on; where it has one-shot episodes, their
    ``reference_untrained_oneshot_error`` and ``reference_raw_oneshot_error`` too (cosine on raw pixels)."""
    untrained = evaluate_split(model, split, embed, None, (1,), with_diagnostics=False)
    size = len(split.query) + (len(split.gallery) if split.gallery is not None else 0)
    raw = evaluate_split(RawInputs(size), split, embed, None, (1,), with_diagnostics=False)
    out = {"reference_untrained_recall_at_1": untrained["recall_at_1"],
           "reference_raw_recall_at_1": raw["recall_at_1"]}
    if split.episodes is not None:   # the same episodes the run's one-shot error is scored on
        out.update(reference_untrained_oneshot_error=untrained["oneshot_error"],
                   reference_raw_oneshot_error=raw["oneshot_error"])
    return out


def probe_indices(n_train: int, seed: int, size: int = PROBE_SIZE) -> torch.Tensor:
    """A fixed, seeded subset of the training set (its own generator: the global RNGs are untouched)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(n_train, generator=generator)[:size]


def drift(model: nn.Module, train_view, probe: torch.Tensor, embed: Embedder,
          previous: Optional[torch.Tensor]) -> tuple[dict[str, float], torch.Tensor]:
    """(``drift_mean``, ``drift_max``) against ``previous`` probe embeddings, and the current ones (CPU)."""
    current = embed(model, train_view, probe)[0].cpu()
    return diagnostics.feature_drift(previous, current), current


def staleness(model: nn.Module, train_view, memory: Optional[EmbeddingMemory], embed: Embedder,
              seed: int, epoch: int, probe: torch.Tensor, probe_now: torch.Tensor,
              least: int = STALENESS_LEAST_ROWS) -> dict[str, float]:
    """``staleness_mean`` over the memory rows of the drift probe's samples (``probe``, whose current
    embeddings ``probe_now`` the drift diagnostic has just computed: no second forward pass), made up to
    ``least`` rows, when fewer, with rows drawn at random by a (seed, epoch) generator and embedded now. Both
    kinds are uniform draws from the memory's rows (the probe is a uniform draw of training samples), so
    their mean estimates the same staleness; a small memory (ratio 0.01) holds only a few probe samples.
    NaN without a memory or before it holds rows."""
    if memory is None or len(memory) == 0:
        return {"staleness_mean": NAN}
    stored, _, indices, _ = memory.valid()
    indices = indices.cpu()
    ordered, order = probe.sort()
    at = torch.searchsorted(ordered, indices).clamp(max=len(probe) - 1)
    slot = torch.where(ordered[at] == indices, order[at], -1)   # the row's sample in the probe, or -1
    known = (slot >= 0).nonzero().squeeze(1)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    drawn = torch.randperm(len(stored), generator=generator)
    # rows written without a training index cannot be re-embedded
    drawn = drawn[(slot[drawn] < 0) & (indices[drawn] >= 0)][:max(least - len(known), 0)]
    if len(known) + len(drawn) == 0:
        return {"staleness_mean": NAN}
    current = [probe_now[slot[known]].to(stored.device)]
    if len(drawn):
        current.append(embed(model, train_view, indices[drawn], keep=False)[0].to(stored.device))  # new rows
    rows = torch.cat([known, drawn]).to(stored.device)
    return {"staleness_mean": float(diagnostics.memory_staleness(stored[rows], torch.cat(current)))}
