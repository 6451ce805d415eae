"""Judge a parsed space against ``TrainConfig`` before Ray starts.

Rules, each failing with a ``SpaceError`` naming file, key, rule and value:

1. every key (base, params, ``when``) is a TrainConfig dotted name (close matches suggested);
2. base values and choice/grid values coerce to the key's type (``--set``-style strings accepted);
   ``uniform``/``loguniform`` only on float keys, ``int`` on int or float keys;
3. ``when`` tests a fixed key (base or default) or a choice/grid param, with values of its type;
   conditions form no cycle; every branch can hold (an impossible condition is a typo);
4. the config's own rules judge the values: base alone, then every probed value of every param
   (bounds of ranges, every choice) with its condition made true, through ``TrainConfig.from_dict``,
   refused only when no combination of the other unconditional swept keys' probed values admits it
   (``tune.search.spaces.combinations``); for grid-only spaces every grid point is built (a fixed-seed
   sample of 4096 points of a larger grid).

Combinations of swept keys outside a grid that break a cross rule (``min_lr > lr`` under cosine, both
sampled) are warned about by ``combination_warning`` and refused by the trial's own ``TrainConfig``.
After ``--set`` overrides, branches that can no longer hold are dropped instead of refused.
"""
from __future__ import annotations

import difflib
import random
from typing import Any, Mapping

from xbm.checks import coerce
from xbm.config import TrainConfig

from tune.search.spaces.combinations import MAX_COMBINATIONS, admitted, free_values, grid_points, refusal
from tune.search.spaces.distributions import Choice
from tune.search.spaces.errors import SpaceError
from tune.search.spaces.param import Branch, Param, member
from tune.search.spaces.schema import RawSpace

DEFAULTS: dict[str, Any] = TrainConfig().to_dict()
TYPES: dict[str, type] = {key: type(value) for key, value in DEFAULTS.items()}


def check_key(key: str, source: str, where: str) -> None:
    if key not in TYPES:
        close = difflib.get_close_matches(key, TYPES, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise SpaceError(source, key, f"unknown {where} key; {hint}valid keys: {', '.join(TYPES)}")


def coerce_value(key: str, value: Any, source: str, what: str) -> Any:
    try:
        return coerce(key, value, TYPES[key])
    except ValueError as exc:
        hint = ""
        if isinstance(value, bool) and TYPES[key] is str:
            hint = " (YAML reads on/off/yes/no/true/false as booleans: quote the word, e.g. 'off')"
        raise SpaceError(source, key, f"{what} {value!r}: {exc}{hint}") from None


def validate(raw: RawSpace, source: str, prune: bool = False) -> tuple[dict[str, Any], dict[str, Param]]:
    """Return (coerced base, params in dependency order) or raise SpaceError."""
    for key in raw.base:
        check_key(key, source, "base")
    base = {key: coerce_value(key, value, source, "base value") for key, value in raw.base.items()}
    params = {key: _coerce_param(param, base, raw.params, source) for key, param in raw.params.items()}
    params = {key: params[key] for key in _dependency_order(params, source)}
    params = _reachable(params, base, source, prune)
    _probe_base(base, params, source)
    return base, params


def _coerce_param(param: Param, base: Mapping[str, Any], params: Mapping[str, Param], source: str) -> Param:
    key = param.key
    check_key(key, source, "params")
    kind = TYPES[key]
    branches = []
    for branch in param.branches:
        dist = branch.dist
        if dist.name in ("uniform", "loguniform") and kind is not float:
            use = "int" if kind is int else "choice"
            raise SpaceError(source, key, f"{dist.name} draws floats but {key} is of type {kind.__name__}; "
                             f"use {use}, got {dist.describe()}")
        if dist.name == "int" and kind not in (int, float):
            raise SpaceError(source, key, f"int draws integers but {key} is of type {kind.__name__}; use "
                             f"choice, got {dist.describe()}")
        if isinstance(dist, Choice):
            values = [coerce_value(key, v, source, f"{dist.name} value") for v in dist.values()]
            try:
                dist = dist.with_values(values)
            except ValueError as exc:  # e.g. [1, "1"] collapse to one value once coerced
                raise SpaceError(source, key, str(exc)) from None
        branches.append(Branch(dist, _coerce_when(key, branch.when, params, source)))
    return Param(key, tuple(branches), param.mutable)


def _coerce_when(key: str, when: Mapping[str, tuple[Any, ...]], params: Mapping[str, Param],
                 source: str) -> dict[str, tuple[Any, ...]]:
    out = {}
    for other, allowed in when.items():
        check_key(other, source, f"'when' (in {key})")
        if other in params:
            tested = params[other]
            if not all(b.dist.is_discrete for b in tested.branches):
                raise SpaceError(source, key, f"'when' can test fixed keys and choice/grid params only, but "
                                 f"{other} is {tested.describe()}")
        out[other] = tuple(coerce_value(other, v, source, f"'when' value for {other} (in {key})") for v in allowed)
    return out


def _dependency_order(params: Mapping[str, Param], source: str) -> list[str]:
    """Params ordered so that every condition's keys come first; a cycle is an error."""
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(key: str, path: list[str]) -> None:
        if state.get(key) == "done":
            return
        if state.get(key) == "visiting":
            cycle = " -> ".join(path[path.index(key):] + [key])
            raise SpaceError(source, key, f"'when' conditions form a cycle: {cycle}")
        state[key] = "visiting"
        for other in sorted(params[key].condition_keys()):
            if other in params:
                visit(other, path + [key])
        state[key] = "done"
        order.append(key)

    for key in params:
        visit(key, [])
    return order


def _reachable(params: dict[str, Param], base: Mapping[str, Any], source: str, prune: bool) -> dict[str, Param]:
    """Keep branches whose condition can hold; an impossible one is an error unless pruning."""
    possible: dict[str, list[Any]] = {k: [v] for k, v in {**DEFAULTS, **base}.items() if k not in params}
    out: dict[str, Param] = {}
    for key, param in params.items():  # dependency order: tested keys are settled first
        kept = []
        for branch in param.branches:
            blocked = [(k, v) for k, v in branch.when.items()
                       if not any(member(p, v) for p in possible.get(k, []))]
            if not blocked:
                kept.append(branch)
            elif not prune:
                k, v = blocked[0]
                now = possible.get(k) or "absent"
                raise SpaceError(source, key, f"'when' {k} in {list(v)} can never hold: {k} is {now}; "
                                 "fix the condition or the value it tests")
        if kept:
            out[key] = Param(key, tuple(kept), param.mutable)
            possible[key] = out[key].possible_values() or []
    return out


def _probe_base(base: dict[str, Any], params: Mapping[str, Param], source: str) -> None:
    exc = refusal(base)
    if exc is not None:
        culprit = next((k for k in base if str(exc).startswith(k)), "base")
        raise SpaceError(source, culprit, f"base value breaks the config's rule: {exc}")
    free = free_values(params)
    for key, param in params.items():
        for branch in param.branches:
            context = {**base, **_witness(branch, params)}
            others = {k: v for k, v in free.items() if k != key and k not in context}
            for value in branch.dist.probe_values():
                if not admitted({**context, key: value}, others):
                    beside = f" (nor beside any bound or choice of {', '.join(others)})" if others else ""
                    raise SpaceError(source, key, f"{branch.dist.name} value {value!r} breaks the config's "
                                     f"rule: {refusal({**context, key: value})}{beside}")
    if params and all(p.is_grid for p in params.values()):  # every grid point is a trial: none may be refused
        every = grid_points(params, {**DEFAULTS, **base})
        for point in (every if len(every) <= MAX_COMBINATIONS else random.Random(0).sample(every, MAX_COMBINATIONS)):
            point = {k: v for k, v in point.items() if v is not None}  # absent: the config's default
            exc = refusal({**base, **point})
            if exc is not None:
                raise SpaceError(source, next(iter(point)), f"grid point {point} breaks the config's rule: {exc}")


def _witness(branch: Branch, params: Mapping[str, Param]) -> dict[str, Any]:
    """Values of the tested params that make ``branch``'s condition hold (recursively)."""
    out: dict[str, Any] = {}
    for other, allowed in branch.when.items():
        if other in params:
            tested = params[other]
            value = next(v for v in tested.possible_values() or () if member(v, allowed))
            out[other] = value
            out.update(_witness(tested.branches[0], params))  # discrete params have one branch
    return out
