"""Find, read and validate search spaces: ``load_space`` and ``list_spaces``."""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Mapping

import search_spaces
from tune.spaces.errors import SpaceError
from tune.spaces.schema import RawSpace, read_space
from tune.spaces.space import SearchSpace
from tune.spaces.validation import check_key, validate

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


def load_space(name_or_path: str | Path, overrides: Mapping[str, Any] | None = None) -> SearchSpace:
    """Read and fully validate a space: a shipped name (``quickstart``) or a YAML path.

    ``overrides`` (the CLI's ``--set key=value``) pin keys after the file is validated: a pinned
    param leaves ``params`` for ``base``, and branches whose condition can no longer hold are dropped.
    """
    path = _locate(name_or_path)
    text = path.read_text()
    source = str(path)
    raw = read_space(text, source)
    base, params = validate(raw, source)
    if overrides:
        for key in overrides:
            check_key(key, source, "--set")
        pinned = {**base, **overrides}
        kept = {k: p for k, p in params.items() if k not in overrides}
        base, params = validate(RawSpace(raw.description, pinned, kept), source + " with --set overrides",
                                prune=True)
    return SearchSpace(path.stem, raw.description, path, text, base, params, overrides)
