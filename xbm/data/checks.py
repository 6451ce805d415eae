"""A run's inputs checked on the machine that launches it, before anything expensive starts: the data set
opens as a trial would open it, and a GPU run over the in-memory budget is warned about its live decoding."""
from __future__ import annotations

from pathlib import Path

from xbm.data.augment import preset
from xbm.data import cache
from xbm.data.registry import build_dataset


def check_inputs(cfg) -> None:
    """Fail fast, on this machine, if ``cfg``'s data set or ``pretrained_path`` cannot be opened.

    The data set is built as a trial builds it (``build_dataset(cfg, images=False)``): its own layout
    check, annotation files and file lists are read, no image is decoded. Raises ``DatasetNotFoundError`` (a
    ``FileNotFoundError``) with the data set's layout, ``FileNotFoundError`` for a missing
    ``pretrained_path``, ``ValueError`` for an unknown data set name.
    """
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
    if cfg.image_cache:
        return None
    splits = build_dataset(cfg, images=False)
    if splits.input_kind != "image":
        return None
    size = cache.estimated_bytes(splits.train.source, splits.style, preset(cfg.augment, splits.style).load_size(cfg.image_size))
    if size <= cache.MEMORY_BUDGET:  # read here, at call time (tests lower it)
        return None
    workers = max(int(cpus) - 1, 1)
    return (f"dataset {cfg.dataset!r} decodes to about {size / 2**30:.1f} GiB, over the {cache.MEMORY_BUDGET / 2**30:.0f} GiB "
            f"kept in memory, and image_cache is not set: every epoch decodes every image again, about "
            f"{LIVE_DECODE_PER_CORE * workers} images/s with {workers} loader worker(s) at 224 px, far below what a "
            f"GPU trains at. Set --set image_cache=DIR (a local disk: decoded once, then read at ~3x the rate)")
