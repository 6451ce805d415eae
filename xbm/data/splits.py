"""From a builder's :class:`RawData` to :class:`DatasetSplits`: global contiguous labels, super-classes,
and the class-disjoint validation split carved from the training classes.

Label order: training classes ``0..T-1``, validation classes ``T..T+V-1``, then test-only classes, each
group sorted by the builder's id. Data sets whose train and test share classes (CIFAR) keep one id per class.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from xbm.data.base import DatasetSplits, EvalSplit, RawData, SampleDataset, Transforms
from xbm.data.episodes import draw_episodes

# Fixed, independent of cfg.seed: every trial of a sweep selects on the same validation classes.
VAL_SPLIT_SEED = 20_240_917


def encode(keys: Sequence) -> np.ndarray:
    """Contiguous int ids for hashable keys (tuples, strings, ints), in sorted-key order."""
    keys = list(keys)
    order = {k: i for i, k in enumerate(sorted(set(keys)))}
    return np.fromiter((order[k] for k in keys), dtype=np.int64, count=len(keys))


def pick_val_classes(train_classes: np.ndarray, val_fraction: float, dataset: str,
                     groups: Optional[np.ndarray] = None) -> np.ndarray:
    """``round(val_fraction * T)`` (at least 1) of the ``T`` training classes, drawn with a fixed seed.
    0 -> none (the papers' protocol). ``groups[i]``, the group of ``train_classes[i]``: whole groups are drawn
    instead (``round(val_fraction * G)`` of the ``G`` groups), so that a group's classes share a split."""
    if val_fraction <= 0.0:
        return train_classes[:0]
    if groups is not None:
        picked = pick_val_classes(np.unique(groups), val_fraction, dataset)
        return np.sort(train_classes[np.isin(groups, picked)])
    return _draw(train_classes, val_fraction, lambda n_val: (
        f"val_fraction={val_fraction} leaves no training class in {dataset!r} ({len(train_classes)} training "
        f"classes, {n_val} for validation); lower val_fraction"))


def _draw(keys: np.ndarray, val_fraction: float, too_many) -> np.ndarray:
    """``round(val_fraction * len(keys))`` (at least 1) of ``keys``, sorted, drawn with :data:`VAL_SPLIT_SEED`;
    ValueError(``too_many(n_val)``) when that leaves none."""
    n_val = max(1, int(round(val_fraction * len(keys))))
    if n_val >= len(keys):
        raise ValueError(too_many(n_val))
    rng = np.random.default_rng(VAL_SPLIT_SEED)
    return np.sort(rng.permutation(np.sort(keys))[:n_val])


def pick_val_superclasses(superclasses: np.ndarray, val_fraction: float, dataset: str) -> np.ndarray:
    """``round(val_fraction * S)`` (at least 1) of the ``S`` super-classes of the training classes, drawn with
    the same fixed seed as :func:`pick_val_classes`; 0 -> none."""
    if val_fraction <= 0.0:
        return superclasses[:0]
    return _draw(superclasses, val_fraction, lambda n_val: (
        f"val_fraction={val_fraction} with val_by=superclass leaves no training super-class in {dataset!r} "
        f"({len(superclasses)} super-classes, {n_val} for validation); lower val_fraction or use val_by=class"))


def _val_keys(raw: RawData, labels: np.ndarray, train_part: np.ndarray, every: np.ndarray, val_fraction: float,
              train_on: str, val_by: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """The builder's ids of the validation classes, and the held-out super-classes' names (val_by=superclass).
    Nothing is held out under ``train+val``; under ``all`` a held-out super-class loses every class it has."""
    carve = val_fraction if train_on != "train+val" else 0.0
    train_keys = np.unique(labels[train_part])
    if val_by == "class":
        groups = None
        if raw.class_groups is not None:
            first = {int(k): int(g) for k, g in zip(labels[train_part], np.asarray(raw.class_groups)[train_part])}
            groups = np.array([first[int(k)] for k in train_keys], dtype=np.int64)
        return pick_val_classes(train_keys, carve, raw.name, groups), ()
    if raw.superlabels is None:
        raise ValueError(f"val_by=superclass holds out whole super-classes, but dataset {raw.name!r} has none; "
                         "use val_by=class (the default), or a data set with super-classes (omniglot, sop, inshop, "
                         "deepfashion2, cifar100, toy)")
    supers = np.asarray(raw.superlabels, dtype=np.int64)
    held = pick_val_superclasses(np.unique(supers[train_part]), carve, raw.name)
    pool = train_part if train_on == "train" else every
    names = raw.superclass_names
    return (np.unique(labels[pool][np.isin(supers[pool], held)]),
            tuple(names[s] if names is not None else str(s) for s in held))


def assemble(raw: RawData, val_fraction: float, image_size: int, train_on: str = "train", val_by: str = "class",
             oneshot_episodes: int = 0) -> DatasetSplits:
    """Relabel, carve the validation classes, drop queries that cannot be answered, wrap in datasets.

    ``train_on`` (``xbm.config.TRAIN_ON``): ``train`` trains on the training classes less the validation
    ones; ``train+val`` on all training classes (no validation split; the test split stays held out);
    ``all`` on every sample of every class, test ones included (the test split is then no held-out split),
    less the validation classes when ``val_fraction`` > 0. ``val_by`` (``xbm.config.VAL_BY``): the validation
    classes are single training classes (``class``; a builder's ``class_groups`` go whole), or every class of
    whole super-classes (``superclass``: the training ones, and under ``all`` every one), which are then never
    trained on. ``oneshot_episodes``: one-shot episodes drawn on the validation and test splits
    (:mod:`xbm.data.episodes`; 0: none)."""
    labels = np.asarray(raw.labels, dtype=np.int64)
    train_part, query, gallery_part = _checked_parts(raw, labels)
    eval_idx = query if gallery_part is None else np.concatenate([query, gallery_part])
    # train_on=all trains on every sample of the parts: an unanswerable query's class gets an id too
    every = np.unique(np.concatenate([train_part, np.asarray(raw.query, dtype=np.int64), eval_idx]))
    val_keys, held_out = _val_keys(raw, labels, train_part, every, val_fraction, train_on, val_by)
    train_keys = np.setdiff1d(np.unique(labels[train_part]), val_keys)
    if train_on == "all" and len(val_keys):   # a held-out super-class's test classes are validation classes now
        query = query[~np.isin(labels[query], val_keys)]
        eval_idx = query if gallery_part is None else np.concatenate([query, gallery_part])
        if len(query) == 0:
            raise ValueError(f"{raw.name}: val_by={val_by} with train_on=all leaves no query sample outside the "
                             "validation classes; lower val_fraction")
    labelled = every if train_on == "all" else eval_idx
    other_keys = np.setdiff1d(np.unique(labels[labelled]), np.concatenate([train_keys, val_keys]))
    order = np.concatenate([train_keys, val_keys, other_keys])
    lookup = np.full(int(labels.max()) + 1, -1, dtype=np.int64)
    lookup[order] = np.arange(len(order))
    glabels = lookup[labels]  # -1 for samples in no split

    transforms = Transforms(image_size)

    def dataset(indices: np.ndarray, role: str) -> SampleDataset:
        indices = np.asarray(indices, dtype=np.int64)
        return SampleDataset(raw.source, indices, glabels[indices], transforms, role)

    pool = every if train_on == "all" else train_part   # what the run trains on, less the validation classes
    in_val = np.isin(labels[pool], val_keys)
    train = dataset(pool[~in_val], "train")
    val = (EvalSplit(dataset(pool[in_val], "eval"), episodes=_episodes(raw, pool[in_val], oneshot_episodes))
           if len(val_keys) else None)
    gallery = None if gallery_part is None else dataset(gallery_part, "eval")
    test = EvalSplit(dataset(query, "eval"), gallery, episodes=_episodes(raw, query, oneshot_episodes))

    kind = raw.source.input_kind
    shape = ((raw.style.channels, image_size, image_size) if kind == "image"
             else tuple(raw.source.load(int(train_part[0])).shape))
    return DatasetSplits(name=raw.name, train=train, val=val, test=test,
                         superclass_of=_superclass_of(raw, lookup, len(order)), num_classes=len(order),
                         input_kind=kind, input_shape=shape, transforms=transforms, style=raw.style,
                         val_superclasses=held_out)


def _checked_parts(raw: RawData, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The builder's training, query and gallery parts as index arrays, its queries without a gallery match
    dropped; a ValueError naming the data set for labels that do not fit the samples or an empty part."""
    if len(labels) != len(raw.source):
        raise ValueError(f"{raw.name}: labels must have one entry per sample, but got {len(labels)} "
                         f"for {len(raw.source)} samples")
    if len(labels) and labels.min() < 0:
        raise ValueError(f"{raw.name}: class ids must be >= 0, but got {labels.min()}")
    train_part, query = np.asarray(raw.train, dtype=np.int64), np.asarray(raw.query, dtype=np.int64)
    gallery_part = None if raw.gallery is None else np.asarray(raw.gallery, dtype=np.int64)
    if gallery_part is not None:
        # A query whose class has no gallery image cannot be retrieved; the official protocols drop it.
        query = query[np.isin(labels[query], labels[gallery_part])]
    if len(train_part) == 0 or len(query) == 0:
        raise ValueError(f"{raw.name}: the training and query parts must be non-empty, but got "
                         f"{len(train_part)} training and {len(query)} answerable query samples")
    return train_part, query, gallery_part


def _episodes(raw: RawData, indices: np.ndarray, n: int):
    """One-shot episodes over the split of samples ``indices`` (positions in it), unrotated samples only."""
    if n <= 0:
        return None
    eligible = np.ones(len(indices), dtype=bool) if raw.rotations is None else np.asarray(raw.rotations)[indices] == 0
    pick = (lambda a: None if a is None else np.asarray(a)[indices])
    return draw_episodes(np.asarray(raw.labels)[indices], pick(raw.superlabels), pick(raw.drawers), eligible, n)


def _superclass_of(raw: RawData, lookup: np.ndarray, num_classes: int) -> Optional[torch.Tensor]:
    """Map every global class to a contiguous super-class id; each class must lie in one super-class."""
    if raw.superlabels is None:
        return None
    supers = np.asarray(raw.superlabels, dtype=np.int64)
    glabels = lookup[np.asarray(raw.labels, dtype=np.int64)]
    used = glabels >= 0
    pairs = np.unique(np.stack([glabels[used], supers[used]], axis=1), axis=0)
    if len(pairs) != num_classes:
        counts = np.bincount(pairs[:, 0], minlength=num_classes)
        bad = int(np.flatnonzero(counts != 1)[0])
        raise ValueError(f"{raw.name}: every class must belong to exactly one super-class, but class {bad} "
                         f"has {counts[bad]}; check the annotation files")
    _, contiguous = np.unique(pairs[:, 1], return_inverse=True)
    out = np.empty(num_classes, dtype=np.int64)
    out[pairs[:, 0]] = contiguous.reshape(-1)
    return torch.as_tensor(out)
