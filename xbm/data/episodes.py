"""One-shot episodes drawn from a split's own classes, shaped as Omniglot's one-shot runs (Lake, Salakhutdinov
and Tenenbaum, Science 2015; ``xbm.evaluate.oneshot`` reads the real ones): in each episode ``way`` classes of one
super-class (an alphabet; every class when the data set has none), for each one training drawing by one drawer
and one test drawing by another, the same two drawers for every class of the episode where they drew them all.
Each test drawing is assigned the episode's training drawing of highest cosine similarity
(:func:`xbm.evaluate.oneshot.episodes_error`).

Drawn once per split from a fixed seed (:data:`EPISODE_SEED`), never from the run's: every epoch and every trial
of a sweep is scored on the same episodes. Only unrotated samples take part (a data set's rotated classes are
training material; the real runs have no rotations). A super-class with fewer than ``way`` usable classes gives
an episode of as many ways as it has (``Episodes.ways``), at least 2.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

ONESHOT_WAY = 20          # the real runs' 20-way choice
EPISODE_SEED = 20_261_202  # fixed, independent of cfg.seed: one set of episodes per split


@dataclass(frozen=True)
class Episodes:
    """``train[e]`` and ``test[e]``: positions (in the split's query dataset) of episode ``e``'s training and
    test drawings, one per class in the same order: test drawing ``i``'s answer is training drawing ``i``."""

    train: tuple[np.ndarray, ...]
    test: tuple[np.ndarray, ...]

    @property
    def ways(self) -> tuple[int, ...]:
        return tuple(len(t) for t in self.train)

    def __len__(self) -> int:
        return len(self.train)


def draw_episodes(labels: np.ndarray, superclasses: Optional[np.ndarray], drawers: Optional[np.ndarray],
                  eligible: np.ndarray, n: int, way: int = ONESHOT_WAY, seed: int = EPISODE_SEED) -> Optional[Episodes]:
    """``n`` episodes over the positions where ``eligible`` is true; ``labels``, ``superclasses``, ``drawers``
    give each position's class, super-class (None: one for all) and drawer (None: every sample its own drawer).
    A class takes part when two of its positions have different drawers; None when no super-class has two
    such classes (or ``n`` is 0)."""
    labels = np.asarray(labels, dtype=np.int64)
    positions = np.flatnonzero(np.asarray(eligible, dtype=bool))
    who = np.arange(len(labels)) if drawers is None else np.asarray(drawers, dtype=np.int64)
    by_class: dict[int, dict[int, int]] = {}   # class -> drawer -> its first position
    for p in positions:
        by_class.setdefault(int(labels[p]), {}).setdefault(int(who[p]), int(p))
    usable = sorted(c for c, drawn in by_class.items() if len(drawn) >= 2)
    if n <= 0 or not usable:
        return None
    supers = np.zeros(len(labels), dtype=np.int64) if superclasses is None else np.asarray(superclasses, np.int64)
    groups: dict[int, list[int]] = {}
    for c in usable:
        groups.setdefault(int(supers[next(iter(by_class[c].values()))]), []).append(c)
    pools = [groups[s] for s in sorted(groups) if len(groups[s]) >= 2]
    if not pools:
        return None
    rng = np.random.default_rng(seed)
    train, test = [], []
    for _ in range(n):
        pool = pools[int(rng.integers(len(pools)))]
        classes = sorted(int(c) for c in rng.choice(pool, size=min(way, len(pool)), replace=False))
        common = sorted(set.intersection(*(set(by_class[c]) for c in classes)))
        if len(common) >= 2:   # the runs' form: one drawer's drawings to choose among, another's to classify
            first, second = (int(d) for d in rng.choice(common, size=2, replace=False))
            pairs = [(by_class[c][first], by_class[c][second]) for c in classes]
        else:                  # no two drawers drew them all: two different drawers per class
            pairs = [tuple(by_class[c][int(d)] for d in rng.choice(sorted(by_class[c]), size=2, replace=False))
                     for c in classes]
        train.append(np.array([a for a, _ in pairs], dtype=np.int64))
        test.append(np.array([b for _, b in pairs], dtype=np.int64))
    return Episodes(tuple(train), tuple(test))
