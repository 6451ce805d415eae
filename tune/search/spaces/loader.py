"""Find, read and validate search spaces: ``load_space`` and ``list_spaces``.

Path-valued keys (``xbm.data.inputs.PATH_KEYS``) are made absolute here, once: in the file (``base:`` values
and ``choice``/``grid`` values of a swept path) relative to the file's folder, as in any config file;
in ``overrides`` (the CLI's ``--set``) relative to the directory the command runs in.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Mapping

import search_spaces
from tune.search.spaces.distributions import Choice, Distribution
from tune.search.spaces.errors import SpaceError
from tune.search.spaces.param import Branch, Param
from tune.search.spaces.schema import RawSpace, read_space
from tune.search.spaces.space import SearchSpace
from tune.search.spaces.validation import check_key, validate
from xbm.data.inputs import PATH_KEYS, absolute_path, absolute_paths

SPACES_DIR = Path(search_spaces.__file__).resolve().parent


def shipped_paths() -> dict[str, Path]:
    """name -> file for every YAML file shipped in ``search_spaces/``."""
    return {p.stem: p for p in sorted(SPACES_DIR.glob("*.yaml"))}


def list_spaces() -> list[tuple[str, str]]:
    """(name, description) of every shipped space, sorted by name (files are read, not validated)."""
    out = []
    for name, path in shipped_paths().items():
        try:
            out.append((name, read_space(path.read_text(), str(path)).description))
        except SpaceError as exc:
            out.append((name, f"(invalid: {exc})"))
    return out


def _locate(name_or_path: str | Path) -> Path:
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.suffix in (".yaml", ".yml") or "/" in text or path.is_file():
        if not path.is_file():
            raise SpaceError(text, None, "no such file; give a name from `xbm-tune spaces` or a YAML path")
        return path.resolve()
    shipped = shipped_paths()
    if text not in shipped:
        close = difflib.get_close_matches(text, shipped, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise SpaceError(text, None, f"unknown search space name; {hint}shipped: {', '.join(shipped)} "
                         "(or give a path to a YAML file)")
    return shipped[text]


def load_space(name_or_path: str | Path, overrides: Mapping[str, Any] | None = None,
               smoke: bool = False) -> SearchSpace:
    """Read and fully validate a space: a shipped name (``quickstart``) or a YAML path.

    ``overrides`` (the CLI's ``--set key=value``) pin keys after the file is validated: a pinned
    param leaves ``params`` for ``base``, and branches whose condition can no longer hold are dropped.
    ``smoke``: the space reduced by its ``smoke:`` section (``smoke_space``; unchanged without one), what
    ``--smoke-test`` runs; ``overrides`` still win over it.
    """
    path = _locate(name_or_path)
    text = path.read_text()
    source = str(path)
    raw = read_space(text, source)
    for key in raw.smoke:
        check_key(key, source, "smoke")
    declared = dict(raw.smoke)
    raw = _absolute(smoke_space(raw) if smoke else raw, path.parent)
    base, params = validate(raw, source)
    space = SearchSpace(path.stem, raw.description, path, text, base, params, smoke=declared)
    return pin_space(space, overrides) if overrides else space


def pin_space(space: SearchSpace, overrides: Mapping[str, Any]) -> SearchSpace:
    """``space`` with ``overrides`` (``--set key=value``) pinned, as ``load_space(..., overrides=...)`` gives it,
    without reading its file again: a pinned param leaves ``params`` for ``base``, and branches whose condition
    can no longer hold are dropped. Pinning twice equals pinning both at once (later values win)."""
    source = space.source
    for key in overrides:
        check_key(key, source, "--set")
    overrides = absolute_paths(overrides, Path.cwd())
    pinned = {**space.base, **overrides}
    kept = {k: p for k, p in space.params.items() if k not in overrides}
    base, params = validate(RawSpace(space.description, pinned, kept), source + " with --set overrides", prune=True)
    return SearchSpace(space.name, space.description, space.path, space.text, base, params,
                       {**space.overrides, **overrides}, smoke=space.smoke)


def smoke_space(raw: RawSpace) -> RawSpace:
    """``raw`` reduced by its ``smoke:`` section: a scalar there pins its key (into ``base``), a grid there
    replaces the key's values (a fixed key becomes that grid). A study's smoke test keeps its data and its
    comparison, at toy sizes: e.g. 2 seeds x 2 batch sizes, a small model, 2 epochs."""
    pinned = {k: v for k, v in raw.smoke.items() if not isinstance(v, Param)}
    # a smoke grid gives a param fewer values under the same condition (a conditional grid stays conditional)
    grids = {k: _same_condition(v, raw.params.get(k)) for k, v in raw.smoke.items() if isinstance(v, Param)}
    base = {k: v for k, v in {**raw.base, **pinned}.items() if k not in grids}
    params = {k: p for k, p in {**raw.params, **grids}.items() if k not in pinned}
    return RawSpace(raw.description, base, params)


def _same_condition(grid: Param, param: Param | None) -> Param:
    """``grid`` (a smoke value) under ``param``'s condition, where ``param`` is a one-branch conditional param."""
    if param is None or len(param.branches) != 1 or not param.branches[0].when:
        return grid
    return Param(grid.key, (Branch(grid.branches[0].dist, param.branches[0].when),), grid.mutable)


def _absolute(raw: RawSpace, folder: Path) -> RawSpace:
    """``raw`` with the file's relative paths (base values, discrete values of a swept path key) joined
    to ``folder``, the file's own folder."""
    params = {}
    for key, param in raw.params.items():
        if key in PATH_KEYS:
            param = Param(key, tuple(Branch(_absolute_choice(b.dist, folder), b.when) for b in param.branches))
        params[key] = param
    return RawSpace(raw.description, absolute_paths(raw.base, folder), params)


def _absolute_choice(dist: Distribution, folder: Path) -> Distribution:
    if not isinstance(dist, Choice):
        return dist  # a range over a path is refused by validation (it draws numbers)
    return dist.with_values([absolute_path(v, folder) if isinstance(v, str) else v for v in dist.values()])
