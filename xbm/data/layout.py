"""Finding a data set's official files under ``data_root``; a missing one raises DatasetNotFoundError."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from xbm.errors import DatasetNotFoundError


def require_root(cfg, dataset: str, layout: str) -> Path:
    """``cfg.data_root`` as a Path; empty or missing -> DatasetNotFoundError naming the layout."""
    if not cfg.data_root:
        raise DatasetNotFoundError(dataset, "<data_root not set>", layout,
                                   f"Set data_root to the folder holding the layout above "
                                   f"(--set data_root=/path/to/{dataset}); xbm never downloads.")
    root = Path(cfg.data_root).expanduser()
    if not root.is_dir():
        raise DatasetNotFoundError(dataset, root, layout)
    return root


def find_file(bases: Sequence[Path], relative: str, dataset: str, layout: str) -> Path:
    """The first ``base/relative`` that exists; else DatasetNotFoundError naming ``bases[0]/relative``.
    Several bases accept both the release's top folder and its parent as data_root; the folder of the
    file found is then the data set's base for image paths."""
    for base in bases:
        if (base / relative).is_file():
            return base / relative
    raise DatasetNotFoundError(dataset, bases[0] / relative, layout)


def check_image(base: Path, relative: str, dataset: str, layout: str) -> None:
    """Fail early, with the layout, when the first listed image is absent (images not extracted)."""
    if not (base / relative).is_file():
        raise DatasetNotFoundError(dataset, base / relative, layout,
                                   "The annotation files are there but the images are not: extract the "
                                   "image archive next to them, as in the layout above.")


def read_rows(path: Path, skip: int = 0) -> list[list[str]]:
    """Whitespace-separated rows after ``skip`` header lines, blank lines dropped."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()[skip:]
    return [line.split() for line in lines if line.strip()]
