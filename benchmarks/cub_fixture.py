"""Synthetic CUB-200-2011 trees: JPEG photos in the official layout, for the benchmarks (no download).

    <root>/CUB_200_2011/
      images.txt                 <image_id> <class folder>/<file>.jpg
      image_class_labels.txt     <image_id> <class_id>
      train_test_split.txt       <image_id> <is_training_image>   (CUB's own image split; the protocol ignores it)
      classes.txt                <class_id> <class folder>
      images/<class folder>/<file>.jpg

``xbm.data.cub200`` trains on classes 1-100 and tests on 101-200, so the ``classes`` used are split evenly
between the two halves whatever their number (``classes=24``: 1-12 and 101-112). Image ``k`` belongs to
class ``class_ids(classes)[k % classes]``; its pixels come from ``(seed, k)`` alone, so the tree is the same
with any number of writer processes. Pixels: smooth sinusoids (JPEG-compressible like a photo) whose
frequencies depend on the class, plus noise, at CUB's typical 500x375.

:func:`ensure_cub` reuses a tree written before with the same arguments: ``write_cub`` is followed by a
marker file (``COMPLETE``, written last, naming the arguments), so a tree cut off while being written, or
written with other arguments, is written again. The command line does the same (``scripts/gpu_check.sh``)::

    python benchmarks/cub_fixture.py DIR --images 6000 [--classes 200] [--workers 16]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

PHOTO_SIZE = (500, 375)  # (width, height)
CUB_IMAGES, CUB_CLASSES = 11_788, 200
COMPLETE = "COMPLETE"  # in <root>/CUB_200_2011, written after every photo and index file


def class_ids(classes: int) -> list[int]:
    """``classes`` CUB class ids, half training (1..) and half test (101..); even ``classes`` <= 200."""
    if classes % 2 or not 2 <= classes <= CUB_CLASSES:
        raise ValueError(f"classes must be even and in [2, {CUB_CLASSES}], but got {classes}")
    half = classes // 2
    return [c for j in range(half) for c in (1 + j, 101 + j)]


def class_folder(c: int) -> str:
    return f"{c:03d}.Synthetic_{c:03d}"


def photo(k: int, c: int, size: tuple[int, int], seed: int = 0) -> np.ndarray:
    """uint8 [H, W, 3] pixels of image ``k`` of class ``c``."""
    rng = np.random.default_rng([seed, k])
    freq = np.random.default_rng([seed, c, 7]).uniform(0.005, 0.05, 3) * rng.uniform(0.8, 1.25, 3)
    yy, xx = np.mgrid[0:size[1], 0:size[0]]
    image = np.stack([127 + 100 * np.sin(freq[i] * xx + freq[(i + 1) % 3] * yy + k) for i in range(3)], axis=-1)
    image += rng.normal(0, 12, image.shape)
    return image.clip(0, 255).astype(np.uint8)


def _write(job: tuple) -> None:
    base, ks, ids, size, seed = job
    for k in ks:
        c = ids[k % len(ids)]
        Image.fromarray(photo(k, c, size, seed)).save(base / "images" / class_folder(c) / f"img_{k:05d}.jpg", quality=90)


def write_cub(root: Path, n: int, classes: int = CUB_CLASSES, size: tuple[int, int] = PHOTO_SIZE,
              workers: int = 1, seed: int = 0) -> Path:
    """Write ``n`` photos of ``classes`` classes under ``root``; returns ``root / "CUB_200_2011"``."""
    base = Path(root) / "CUB_200_2011"
    ids = class_ids(classes)
    for c in ids:
        (base / "images" / class_folder(c)).mkdir(parents=True, exist_ok=True)
    chunks = [(base, range(i, n, max(1, workers) * 8), ids, size, seed) for i in range(max(1, workers) * 8)]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            list(pool.map(_write, chunks))
    else:
        for chunk in chunks:
            _write(chunk)
    rows = [(k + 1, ids[k % len(ids)]) for k in range(n)]
    (base / "images.txt").write_text("".join(f"{i} {class_folder(c)}/img_{i - 1:05d}.jpg\n" for i, c in rows))
    (base / "image_class_labels.txt").write_text("".join(f"{i} {c}\n" for i, c in rows))
    (base / "train_test_split.txt").write_text("".join(f"{i} {i % 2}\n" for i, _ in rows))
    (base / "classes.txt").write_text("".join(f"{c} {class_folder(c)}\n" for c in sorted(ids)))
    return base


def ensure_cub(root: Path, n: int, classes: int = CUB_CLASSES, size: tuple[int, int] = PHOTO_SIZE,
               workers: int = 1, seed: int = 0) -> tuple[Path, bool]:
    """``write_cub``'s tree under ``root``, reused when its ``COMPLETE`` marker names these arguments, else
    written anew (an incomplete or different tree removed first), the marker last. Returns
    ``(root / "CUB_200_2011", reused)``."""
    base = Path(root) / "CUB_200_2011"
    marker = base / COMPLETE
    want = json.dumps({"images": n, "classes": classes, "size": list(size), "seed": seed})
    if marker.is_file() and marker.read_text() == want:
        return base, True
    if base.exists():  # cut off while written, or other arguments: its files are not these
        shutil.rmtree(base)
    write_cub(root, n, classes, size, workers, seed)
    marker.write_text(want)
    return base, False


def main() -> None:
    parser = argparse.ArgumentParser(description="Write (or reuse) a synthetic CUB-200-2011 tree under DIR.")
    parser.add_argument("root", metavar="DIR")
    parser.add_argument("--images", type=int, default=CUB_IMAGES, help="photos (default %(default)s, as CUB)")
    parser.add_argument("--classes", type=int, default=CUB_CLASSES, help="even, <= 200 (default %(default)s)")
    parser.add_argument("--size", type=int, nargs=2, default=PHOTO_SIZE, metavar=("WIDTH", "HEIGHT"))
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)), help="writer processes")
    args = parser.parse_args()
    start = time.perf_counter()
    base, reused = ensure_cub(Path(args.root), args.images, args.classes, tuple(args.size), args.workers)
    print(f"photos: {'reused' if reused else 'wrote'} {args.images} {args.size[0]}x{args.size[1]} JPEGs "
          f"({args.classes} classes) in {base} in {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
