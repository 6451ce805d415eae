"""A run's inputs on disk: which config keys are paths, and making them absolute once (torch-free; opening
them before anything expensive starts is ``xbm.data.checks``).

A relative path means "relative to where I typed it": ``--set`` values to the directory the command was
launched from, values in a YAML file (``xbm-tune train --config``, a space file's ``base:``) to that
file's folder. They are made absolute once, at the boundary, because later code runs elsewhere: Ray Tune
runs each trial in its own trial directory, where a relative ``data_root`` points at nothing.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

#: every TrainConfig key whose value is a file or folder path (extend here when adding one)
PATH_KEYS: tuple[str, ...] = ("data_root", "pretrained_path", "image_cache")
#: the path keys a checkpointed run may resume with at another location (the same files, moved); each
#: is also in ``xbm.trainer.RESUMABLE_CHANGES``. ``pretrained_path`` is not: it is part of what a
#: checkpoint's run learnt from.
RELOCATABLE_KEYS: tuple[str, ...] = ("data_root", "image_cache")


def absolute_path(value: str, base_dir: str | Path) -> str:
    """``value`` with ``~`` expanded, joined to ``base_dir`` when relative, normalised; "" (unset) stays ""."""
    if not value:
        return value
    return os.path.normpath(os.path.join(os.path.abspath(base_dir), os.path.expanduser(value)))


def absolute_paths(values: Mapping[str, Any], base_dir: str | Path, prefix: str = "") -> dict[str, Any]:
    """A copy of a config dict (flat dotted, or nested as a YAML file may hold it) with every
    :data:`PATH_KEYS` string value made absolute against ``base_dir``; everything else unchanged."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out[key] = absolute_paths(value, base_dir, f"{name}.")
        elif name in PATH_KEYS and isinstance(value, str):
            out[key] = absolute_path(value, base_dir)
        else:
            out[key] = value
    return out
