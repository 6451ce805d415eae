"""Read a search-space YAML file into its parts, checking its shape (not yet its meaning).

Shape::

    description: <text citing the source>        # optional for user files, required for shipped ones
    base:   {<dotted key>: <value>, ...}         # fixed TrainConfig values
    params: {<dotted key>: <spec>, ...}          # swept values
    smoke:  {<dotted key>: <value or grid>, ...} # optional: what ``--smoke-test`` runs instead (``smoke_space``)

    <spec>   := {<distribution>: <args>[, when: {<key>: <value or [values]>, ...}][, mutable: true]}
              | [<spec with when>, <spec with when>, ...]   # one range per condition

Duplicated keys anywhere (PyYAML silently keeps the last one) are errors, with their line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from tune.search.spaces.distributions import DISTRIBUTIONS, build_distribution
from tune.search.spaces.errors import SpaceError
from tune.search.spaces.param import Branch, Param

SPACE_SECTIONS = ("description", "base", "params", "smoke")


@dataclass
class RawSpace:
    """The file's parts: base values as written, params with distributions built but not yet coerced."""

    description: str
    base: dict[str, Any]
    params: dict[str, Param]
    smoke: dict[str, Any] = field(default_factory=dict)  # key -> a scalar (pinned) or a Param (a smaller grid)


class _StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types: its classes are Any
    """SafeLoader that refuses duplicated mapping keys."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise SpaceError(loader.name, str(key), f"key is duplicated (lines {seen[key]} and {line}); "
                             "a key may appear once: keep one of them")
        seen[key] = line
    mapping: dict[Any, Any] = yaml.SafeLoader.construct_mapping(loader, node, deep=deep)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str, source: str) -> Any:
    loader = _StrictLoader(text)
    loader.name = source
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise SpaceError(source, None, f"is not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def header_comments(text: str) -> list[str]:
    """The comment lines that open a space file, without their ``#``: where a space reproducing a paper's table
    cites it and lists the paper's numbers (YAML drops comments, so ``show-space`` reads them from the text)."""
    lines = []
    for line in text.splitlines():
        if line.startswith("#"):
            lines.append(line[1:].removeprefix(" ").rstrip())
        elif line.strip():
            break
    return lines


def read_space(text: str, source: str) -> RawSpace:
    """Parse and shape-check one file's text; ``source`` names it in errors."""
    data = parse_yaml(text, source)
    if not isinstance(data, dict):
        raise SpaceError(source, None, f"must be a mapping with keys {list(SPACE_SECTIONS)}, but got {type(data).__name__}")
    unknown = [k for k in data if k not in SPACE_SECTIONS]
    if unknown:
        raise SpaceError(source, str(unknown[0]), f"unknown section; valid sections: {', '.join(SPACE_SECTIONS)}")
    description = data.get("description") or ""
    if not isinstance(description, str):
        raise SpaceError(source, "description", f"must be a string, but got {description!r}")
    base = data.get("base") or {}
    params = data.get("params") or {}
    smoke = data.get("smoke") or {}
    for section, value in (("base", base), ("params", params), ("smoke", smoke)):
        if not isinstance(value, dict):
            raise SpaceError(source, section, f"must be a mapping of dotted keys, but got {value!r}")
    for key, value in base.items():
        if isinstance(value, (dict, list)):
            raise SpaceError(source, str(key), f"base values are fixed scalars, but got {value!r}; "
                             "to sweep it, move it under params with a distribution")
    both = sorted(set(map(str, base)) & set(map(str, params)))
    if both:
        raise SpaceError(source, both[0], "is both in base and in params: a key is either fixed or swept")
    return RawSpace(description.strip(), {str(k): v for k, v in base.items()},
                    {str(k): _read_param(str(k), spec, source) for k, spec in params.items()},
                    _read_smoke(smoke, source))


def _read_smoke(smoke: dict[Any, Any], source: str) -> dict[str, Any]:
    """The ``smoke:`` section: each key a fixed scalar (pinned, as ``--set`` pins) or ``{grid: [...]}`` (the
    smoke test's grid for that key: fewer seeds, fewer values), nothing else."""
    out: dict[str, Any] = {}
    for key, value in smoke.items():
        key = str(key)
        if isinstance(value, list):
            raise SpaceError(source, f"smoke.{key}", f"a smoke value is a scalar or {{grid: [...]}}, but got {value!r}")
        out[key] = value
        if isinstance(value, dict):
            param = _read_param(key, value, source)
            if not param.is_grid:
                raise SpaceError(source, f"smoke.{key}", "a smoke param must be a grid (the smoke test's points are "
                                 f"listed, not drawn), but got {param.describe()}")
            out[key] = param
    return out


def _read_param(key: str, spec: Any, source: str) -> Param:
    specs = spec if isinstance(spec, list) else [spec]
    if not specs:
        raise SpaceError(source, key, "an empty list of branches; give {<distribution>: <args>}")
    mutable = [bool(s["mutable"]) for s in specs if isinstance(s, dict) and "mutable" in s]
    specs = [{k: v for k, v in s.items() if k != "mutable"} if isinstance(s, dict) else s for s in specs]
    branches = tuple(_read_branch(key, s, source) for s in specs)
    if len(branches) > 1:
        _check_branches(key, branches, source)
    if any(mutable):
        _check_mutable(key, branches, source)
    return Param(key, branches, mutable=any(mutable))


def _check_mutable(key: str, branches: tuple[Branch, ...], source: str) -> None:
    """``mutable: true`` (``--scheduler pbt``): a key the trainer takes mid-run, with one unconditional,
    continuous or choice distribution for explore to perturb or resample."""
    from xbm.config import IMMUTABLE_REASONS, MUTABLE_KEYS

    if key not in MUTABLE_KEYS:
        why = IMMUTABLE_REASONS.get(key, "the trainer reads it once, when the run is built")
        raise SpaceError(source, key, f"cannot be mutable: {why}. Mutable keys: {', '.join(MUTABLE_KEYS)}")
    if len(branches) > 1 or branches[0].when or branches[0].dist.is_grid:
        raise SpaceError(source, key, "a mutable param needs one unconditional distribution (not grid), so that "
                         "explore can perturb or resample it")


def _read_branch(key: str, spec: Any, source: str) -> Branch:
    if not isinstance(spec, dict):
        raise SpaceError(source, key, f"a param needs a distribution such as {{uniform: [0.0, 1.0]}}, but got "
                         f"{spec!r}; fixed values go under base")
    names = [k for k in spec if k != "when"]
    unknown = [k for k in names if k not in DISTRIBUTIONS]
    if unknown:
        raise SpaceError(source, key, f"unknown distribution {unknown[0]!r}; valid: {', '.join(DISTRIBUTIONS)}"
                         " (and 'when' for a condition)")
    if len(names) != 1:
        raise SpaceError(source, key, f"needs exactly one distribution, but got {names or 'none'}; "
                         f"valid: {', '.join(DISTRIBUTIONS)}")
    try:
        dist = build_distribution(names[0], spec[names[0]])
    except ValueError as exc:
        raise SpaceError(source, key, str(exc)) from None
    when = _read_when(key, spec.get("when"), source)
    return Branch(dist, when)


def _read_when(key: str, when: Any, source: str) -> dict[str, tuple[Any, ...]]:
    if when is None:
        return {}
    if not isinstance(when, dict) or not when:
        raise SpaceError(source, key, f"'when' must map keys to a value or a list of values, "
                         f"e.g. {{normaliser.kind: axbn}}, but got {when!r}")
    out: dict[str, tuple[Any, ...]] = {}
    for other, allowed in when.items():
        allowed = tuple(allowed) if isinstance(allowed, list) else (allowed,)
        if not allowed or any(isinstance(a, (dict, list)) for a in allowed):
            raise SpaceError(source, key, f"'when' value for {other!r} must be a scalar or a non-empty list "
                             f"of scalars, but got {when[other]!r}")
        if str(other) == key:
            raise SpaceError(source, key, "'when' cannot test the param itself")
        out[str(other)] = allowed
    return out


def _check_branches(key: str, branches: tuple[Branch, ...], source: str) -> None:
    """Branches of one key: each conditional, one distribution kind, pairwise exclusive conditions."""
    kinds = {b.dist.name for b in branches}
    if len(kinds) > 1:
        raise SpaceError(source, key, f"branches must share one distribution kind (Optuna keeps one kind "
                         f"per name), but got {sorted(kinds)}")
    if branches[0].dist.is_discrete:
        raise SpaceError(source, key, f"{branches[0].dist.name} cannot have several branches (Optuna needs "
                         "the same choices under one name); list every value in one choice")
    for i, a in enumerate(branches):
        if not a.when:
            raise SpaceError(source, key, f"branch {i + 1} of {len(branches)} has no 'when'; each branch of "
                             "a multi-branch param needs its own condition")
        for j, b in enumerate(branches[:i]):
            disjoint = any(k in b.when and not set(a.when[k]) & set(b.when[k]) for k in a.when)
            if not disjoint:
                raise SpaceError(source, key, f"branches {j + 1} and {i + 1} can both hold ({dict(b.when)} vs "
                                 f"{dict(a.when)}); their conditions must exclude each other on some key")
