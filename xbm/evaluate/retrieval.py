"""Nearest neighbours of embeddings for people to look at: ``retrieve``'s top-k and the report's test queries.

Rows are L2-normalised, so the Euclidean order of the k-NN search (:func:`xbm.evaluate.knn.iter_neighbours`,
faiss or torch) is the cosine-similarity order; the similarity shown is the dot product.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np
import torch

from xbm.evaluate.knn import iter_neighbours


def nearest(query: torch.Tensor, k: int, gallery: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(indices [n, k] int64, cosine similarities [n, k] float32) of the ``k`` nearest ``gallery`` rows of each
    ``query`` row, nearest first; ``gallery`` None: leave-one-out within ``query``."""
    reference = query if gallery is None else gallery
    available = len(reference) - (1 if gallery is None else 0)
    if not 1 <= k <= available:
        raise ValueError(f"k must be in [1, {available}] (the gallery's size{' - 1' if gallery is None else ''}), "
                         f"but got k={k}")
    query, reference = query.float().contiguous(), reference.float().contiguous()
    blocks = [idx for _, idx in iter_neighbours(query, k, None if gallery is None else reference)]
    indices = torch.cat(blocks).to(torch.int64).cpu()
    sims = (query.cpu()[:, None, :] * reference.cpu()[indices]).sum(-1)
    return indices, sims


def spread_queries(n: int, count: int) -> np.ndarray:
    """``count`` query positions spread evenly over ``n`` (the data sets order queries by class)."""
    return np.unique(np.linspace(0, n - 1, min(count, n)).round().astype(np.int64))


def split_neighbours(payload: Mapping[str, Any], queries: int = 8, k: int = 5, device: str = "auto") -> dict:
    """The weights ``payload`` (a ``best_weights.pt``: ``model``, ``config``) evaluated as the trainer does on its
    data set's test split: ``queries`` test queries and their ``k`` nearest neighbours in the test gallery
    (leave-one-out when there is none). Returns numpy only: ``query_labels`` [q], ``neighbour_labels`` [q, k],
    ``similarities`` [q, k], ``query_images`` / ``neighbour_images`` (uint8 [H, W, C] as the model saw them)."""
    from xbm.config import TrainConfig
    from xbm.data import build_dataset
    from xbm.models import create_embedding_model, model_kwargs
    from xbm.runtime.device import Runtime
    from xbm.training.loaders import Embedder

    cfg = TrainConfig.from_dict(dict(payload["config"])).replace(pretrained=False, pretrained_path="")
    splits = build_dataset(cfg)
    prep = splits.preprocessing
    if prep is None:
        raise ValueError(f"the data set {cfg.dataset!r} holds vectors, not images: nothing to show")
    model = create_embedding_model(**model_kwargs(cfg), input_shape=tuple(splits.input_shape))
    model.load_state_dict(payload["model"])
    runtime = Runtime.from_config("cuda" if device == "auto" and torch.cuda.is_available() else
                                  ("cpu" if device == "auto" else device), "auto", True)
    model.to(runtime.device)
    embed = Embedder(runtime, 0, prepare=prep.batch_norm().to(runtime.device))
    split = splits.test
    query, query_labels = embed(model, split.query)
    gallery_set = split.gallery if split.gallery is not None else split.query
    gallery, gallery_labels = (embed(model, split.gallery) if split.gallery is not None else (None, query_labels))
    picks = spread_queries(len(query), queries)
    indices, sims = nearest(query[picks], k + (1 if gallery is None else 0), gallery if gallery is not None else query)
    if gallery is None:  # drop each query itself (ties aside, its first neighbour)
        indices, sims = _without_self(indices, sims, picks, k)
    transform = prep.eval_transform()

    def image(dataset, i: int) -> np.ndarray:
        pixels = transform(dataset.transforms.images(int(dataset.indices[i])))
        return pixels.permute(1, 2, 0).numpy()

    return {"query_labels": query_labels.cpu().numpy()[picks],
            "neighbour_labels": gallery_labels.cpu().numpy()[indices.numpy()],
            "similarities": sims.numpy(),
            "query_images": [image(split.query, int(i)) for i in picks],
            "neighbour_images": [[image(gallery_set, int(j)) for j in row] for row in indices.numpy()],
            "dataset": cfg.dataset}


def _without_self(indices: torch.Tensor, sims: torch.Tensor, picks: np.ndarray, k: int):
    keep = [[c for c in range(indices.shape[1]) if int(indices[r, c]) != int(picks[r])][:k] for r in range(len(picks))]
    rows = torch.arange(len(picks))[:, None]
    columns = torch.tensor(keep)
    return indices[rows, columns], sims[rows, columns]
