"""Cross rules between swept keys: which combinations of their values ``TrainConfig`` refuses.

Some values break a rule only beside some values of another swept key: ``min_lr <= lr`` under the
cosine schedule, ``batch_size`` a multiple of ``samples_per_class``. A swept key's base value (or
default) is never used, so judging a value against it refuses good spaces: ``lr`` in [1e-3, 1e-1]
with ``min_lr`` in [1e-5, 1e-3] has no bad combination, yet ``min_lr = 1e-3`` breaks the rule beside
the default ``lr = 1e-4``. So validation refuses a value only when no combination of the other swept
keys' probed values (each range's bounds, every choice) admits it, and ``combination_warning`` names
the combinations that remain refused: a trial that draws one ends at once as 'config refused (see
error)' (``tune.trial.base.refused_row``) while the sweep goes on.

Only unconditional params take part (a conditional one is absent in part of the space). Beyond
``MAX_COMBINATIONS`` combinations a fixed-seed sample of that many is judged instead of all.
"""
from __future__ import annotations

import itertools
import math
import random
from typing import Any, Iterator, Mapping

from xbm.config import TrainConfig

from tune.search.spaces.param import Param

MAX_COMBINATIONS = 4096


def refusal(values: Mapping[str, Any]) -> ValueError | None:
    """The config's refusal of ``values``, or None when they build a TrainConfig."""
    try:
        TrainConfig.from_dict(dict(values))
    except ValueError as exc:
        return exc
    return None


def free_values(params: Mapping[str, Param]) -> dict[str, list[Any]]:
    """Each unconditional param's probed values (the bounds of a range, every choice)."""
    return {key: param.branches[0].dist.probe_values() for key, param in params.items()
            if len(param.branches) == 1 and not param.branches[0].when}


def grid_points(params: Mapping[str, Param], fixed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every point of an all-grid space, each a dict of all its params in dependency order: a param takes each
    value of the branch whose condition holds on the point so far (``fixed`` gives the keys it may test that are
    not swept), or None (absent) where none holds. So a conditional grid multiplies only the points where it
    exists: ``normaliser.kind: {grid: [none, xbn], when: {memory.enabled: true}}`` beside ``memory.enabled:
    {grid: [false, true]}`` is 3 points, not 4 with two of them the same run."""
    points: list[dict[str, Any]] = [{}]
    for key, param in params.items():
        grown = []
        for point in points:
            branch = param.active({**fixed, **point})
            grown += [{**point, key: value} for value in ([None] if branch is None else branch.dist.values() or [])]
        points = grown
    return points


def combinations(values: Mapping[str, list[Any]]) -> tuple[Iterator[dict[str, Any]], int]:
    """(the combinations to judge, how many there are): all of them, or a fixed-seed sample of
    ``MAX_COMBINATIONS`` when there are more."""
    keys, total = list(values), math.prod(len(v) for v in values.values())
    if total <= MAX_COMBINATIONS:
        points: Iterator[tuple[Any, ...]] = itertools.product(*values.values())
    else:
        rng = random.Random(0)
        points = (tuple(rng.choice(v) for v in values.values()) for _ in range(MAX_COMBINATIONS))
    return (dict(zip(keys, point)) for point in points), total


def admitted(values: Mapping[str, Any], others: Mapping[str, list[Any]]) -> bool:
    """Whether ``values`` build a TrainConfig beside some combination of the other swept keys' values."""
    if refusal(values) is None:
        return True
    points, _ = combinations(others)
    return bool(others) and any(refusal({**values, **point}) is None for point in points)


def combination_warning(base: Mapping[str, Any], params: Mapping[str, Param]) -> str | None:
    """What a sweep prints when some combinations of two or more swept keys' values break a rule."""
    if all(param.is_grid for param in params.values()):
        return None  # validation built these very points (``_probe``) and refused the space on any of them
    free = free_values(params)
    if len(free) < 2:
        return None  # one swept key: each of its values was judged against the base already
    points, total = combinations(free)
    judged = refused = 0
    example = None
    for point in points:
        judged += 1
        exc = refusal({**base, **point})
        if exc is not None:
            refused += 1
            example = example or (point, exc)
    if example is None:
        return None
    point, exc = example
    share = f"{refused} of the {judged}" + (" sampled" if judged < total else "")
    return (f"{share} combinations of the swept keys' bounds and choices break a rule of the config, e.g. "
            f"{point}: {exc}. A trial that draws such a combination ends at once as 'config refused (see "
            f"error)'; narrow the ranges so that every combination holds")
