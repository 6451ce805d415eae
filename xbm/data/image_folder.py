"""A folder of images as ``embed`` and ``retrieve`` read it: every image file under it, sorted, and a label
per image when the layout gives one (``FOLDER/<class>/<image>``, as torchvision's ``ImageFolder``)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})


def list_images(folder: str | Path) -> tuple[list[str], Optional[list[str]]]:
    """(paths, labels): the image files under ``folder`` (recursively, by suffix, sorted) and, when every one
    sits directly in a first-level sub-folder, that sub-folder's name as its label (else None)."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"no image folder at {root}")
    paths = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not paths:
        raise ValueError(f"{root} holds no image file (suffixes {sorted(IMAGE_SUFFIXES)})")
    parts = [p.relative_to(root).parts for p in paths]
    labels = [q[0] for q in parts] if all(len(q) == 2 for q in parts) else None
    return [str(p) for p in paths], labels
