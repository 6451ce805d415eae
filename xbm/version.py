"""The installed version of xbm-tune: ``xbm.__version__`` and ``xbm-tune --version``.

One source of truth, the ``version`` of pyproject.toml's ``[project]`` table, read as the Python Packaging
User Guide describes ("Single-sourcing the project version"): through ``importlib.metadata``, the core
metadata (PEP 566) that pip, uv and ``pip install -e`` write at install time:

1. ``importlib.metadata.version("xbm-tune")``, the installed distribution's metadata;
2. where xbm-tune is not installed (a source tree on ``PYTHONPATH``): the ``version`` of the
   ``pyproject.toml`` beside the package, when that file's ``[project] name`` is ``xbm-tune`` (PEP 503's
   comparison: ``xbm_tune`` too);
3. otherwise :data:`UNKNOWN`, ``"0+unknown"``: a valid PEP 440 version (a local label on 0) that sorts below
   every release from 0.0.1 on, so a comparison never mistakes an unidentified copy for a newer one.

``xbm.__version__`` is read once, at its first use (:mod:`xbm` attaches it lazily); never from git.
"""
from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

DISTRIBUTION = "xbm-tune"
UNKNOWN = "0+unknown"  # PEP 440: release 0, local label "unknown"
PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"   # a source tree's, beside xbm/


def package_version(distribution: str = DISTRIBUTION, pyproject: Path = PYPROJECT) -> str:
    """The version of ``distribution``: installed metadata, else the source tree's ``pyproject``, else
    :data:`UNKNOWN` (module docstring)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return source_tree_version(distribution, pyproject)


def source_tree_version(distribution: str, pyproject: Path) -> str:
    """``[project] version`` of ``pyproject`` when it declares ``distribution``, else :data:`UNKNOWN`
    (no file, another project's file, a dynamic version, or Python 3.10, which has no ``tomllib``)."""
    try:
        project = _toml(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, ValueError):   # tomllib.TOMLDecodeError is a ValueError
        return UNKNOWN
    if _normalised(project.get("name", "")) != _normalised(distribution) or not isinstance(project.get("version"), str):
        return UNKNOWN
    return project["version"]


def _toml(text: str) -> dict:
    """``text`` parsed by tomllib (Python >= 3.11; the check is one mypy reads for its python_version 3.10 too);
    an empty table on 3.10."""
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib.loads(text)
    return {}


def _normalised(name: str) -> str:
    """A distribution name as PEP 503 compares them: case and runs of ``-_.`` do not count."""
    return re.sub(r"[-_.]+", "-", str(name)).lower()


__version__ = package_version()
