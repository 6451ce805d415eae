"""A run's inputs on disk: which config keys are paths, making them absolute once, and checking that they
can be opened before anything expensive starts.

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


def check_inputs(cfg) -> None:
    """Fail fast, on this machine, if ``cfg``'s data set or ``pretrained_path`` cannot be opened.

    The data set is built as a trial builds it (``build_dataset(cfg, images=False)``): its own layout
    check, annotation files and file lists are read, no image is decoded. Raises ``DatasetNotFoundError`` (a
    ``FileNotFoundError``) with the data set's layout, ``FileNotFoundError`` for a missing
    ``pretrained_path``, ``ValueError`` for an unknown data set name.
    """
    from xbm.data import build_dataset

    if cfg.pretrained_path and not Path(cfg.pretrained_path).is_file():
        raise FileNotFoundError(f"pretrained_path must name an existing state-dict file, but got "
                                f"{cfg.pretrained_path!r}")
    build_dataset(cfg, images=False)


#: images/s one worker core decodes live at 224 px (docs/data.md, benchmarks/bench_pipeline.py: 143)
LIVE_DECODE_PER_CORE = 143


def live_decode_warning(cfg, cpus: float) -> str | None:
    """For a GPU run: a warning when ``cfg``'s images are over the in-memory budget and no ``image_cache``
    is set, so that every epoch decodes every JPEG again on ``cpus - 1`` loader workers; None otherwise.
    Reads the data set's file lists only (no image decoded)."""
    from xbm.data import build_dataset
    from xbm.data.augment import preset
    from xbm.data.cache import MEMORY_BUDGET, estimated_bytes

    if cfg.image_cache:
        return None
    splits = build_dataset(cfg, images=False)
    if splits.input_kind != "image":
        return None
    size = estimated_bytes(splits.train.source, splits.style, preset(cfg.augment, splits.style).load_size(cfg.image_size))
    if size <= MEMORY_BUDGET:
        return None
    workers = max(int(cpus) - 1, 1)
    return (f"dataset {cfg.dataset!r} decodes to about {size / 2**30:.1f} GiB, over the {MEMORY_BUDGET / 2**30:.0f} GiB "
            f"kept in memory, and image_cache is not set: every epoch decodes every image again, about "
            f"{LIVE_DECODE_PER_CORE * workers} images/s with {workers} loader worker(s) at 224 px, far below what a "
            f"GPU trains at. Set --set image_cache=DIR (a local disk: decoded once, then read at ~3x the rate)")
