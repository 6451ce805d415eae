"""Builders for the one-shot tests: 4x4 Omniglot-style drawings, run folders (and zips of them, as the release's
all_runs.zip), and an export whose embedding is the drawing itself, so that every similarity can be computed
by hand.

The export (``mlp``, grey, 4 px, no statistics) has identity weights: its embedding of a drawing is the
flattened decoded pixels / 255, L2-normalised. Drawings are 1-bit PNGs, black strokes on white, as Omniglot's;
with the export's ``invert`` the embedding is the stroke indicator, so cos(S, T) = |S & T| / sqrt(|S| |T|)
for stroke sets S, T (pixels numbered row by row, 0..15).
"""
from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from xbm.config import TrainConfig
from xbm.data.preprocess import Preprocessing
from xbm.evaluate.embedder import write_export
from xbm.models import create_embedding_model, model_kwargs

SIDE = 4
ROWS = [set(range(SIDE * r, SIDE * r + SIDE)) for r in range(SIDE)]  # four disjoint strokes: cosine 0 apart


def identity_export(folder: Path, invert: bool = True) -> Path:
    """An export folder whose embedding is the decoded drawing (module docstring); ``invert`` as recorded."""
    n = SIDE * SIDE
    cfg = TrainConfig.from_dict({"model": "mlp", "embedding_size": n, "pretrained": False})
    model = create_embedding_model(**model_kwargs(cfg), input_shape=(1, SIDE, SIDE))
    state = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    for key in ("backbone.layers.1.weight", "backbone.layers.3.weight", "head.weight"):
        state[key][:n, :n] = torch.eye(n)  # ReLU passes the non-negative pixels through unchanged
    prep = Preprocessing(mode="L", invert=invert, load_size=SIDE, image_size=SIDE, preset="none")
    return write_export(folder, state, model="mlp", embedding_size=n, input_shape=(1, SIDE, SIDE),
                        preprocessing=prep, provenance={"run": "identity"}, config={"model": "mlp"})


def draw(path: Path, strokes: set[int]) -> Path:
    """A 4x4 1-bit PNG: black (0) at the pixels ``strokes``, white elsewhere."""
    pixels = np.full(SIDE * SIDE, 255, dtype=np.uint8)
    pixels[sorted(strokes)] = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.reshape(SIDE, SIDE)).convert("1").save(path)
    return path


def write_run(root: Path, name: str, training: dict[str, set[int]], tests: list[tuple[str, set[int], str]],
              from_root: bool = True) -> Path:
    """``root/name`` with ``training/<class>.png`` and ``test/<item>.png``; ``class_labels.txt`` lists
    ``tests`` (item, strokes, answer class) in the given order, paths as the release writes them
    (``run01/test/item01.png``, ``from_root``) or relative to the run (``test/item01.png``)."""
    run = root / name
    for cls, strokes in training.items():
        draw(run / "training" / f"{cls}.png", strokes)
    prefix = f"{name}/" if from_root else ""
    lines = []
    for item, strokes, answer in tests:
        draw(run / "test" / f"{item}.png", strokes)
        lines.append(f"{prefix}test/{item}.png {prefix}training/{answer}.png")
    (run / "class_labels.txt").write_text("\n".join(lines) + "\n")
    return run


def two_runs(root: Path) -> dict[str, int]:
    """Two 4-way runs; returns their errors by hand. A two-pixel test drawing inside row r has cosine
    2 / sqrt(2 * 4) = 0.71 with row r's drawing and 0 with the others: it is assigned row r's class."""
    r0, r1, r2, r3 = ROWS
    # run01: classes not in row order, lines not in item order (pairing by position would be wrong)
    write_run(root, "run01", {"class01": r2, "class02": r0, "class03": r3, "class04": r1}, [
        ("item03", {4, 5}, "class04"),     # row 1 -> class04: right
        ("item01", {1, 2}, "class02"),     # row 0 -> class02: right
        ("item04", {12, 13}, "class01"),   # row 3 -> class03, but its class is class01: wrong
        ("item02", {14, 15}, "class03"),   # row 3 -> class03: right
    ])
    write_run(root, "run02", {"class01": r0, "class02": r1, "class03": r2, "class04": r3}, [
        ("item01", {0, 1}, "class01"),     # right
        ("item02", {8, 9}, "class02"),     # row 2 -> class03: wrong
        ("item03", {10, 11}, "class03"),   # right
        ("item04", {4, 7}, "class04"),     # row 1 -> class02: wrong
    ], from_root=False)
    return {"run01": 1, "run02": 2}


def polarity_run(root: Path) -> Path:
    """One 2-way run that only the inverted reading gets right. item01 is a dot at pixel 0, of the class whose
    drawing is row 0 (pixels 0-3); the other class is a dot at pixel 15, drawn again as item02.
    Strokes high (inverted): cos(item01, row 0) = 1 / sqrt(4) = 0.5 > cos(item01, dot 15) = 0: right.
    Background high (not inverted): cos = 12 / sqrt(15 * 12) = 0.894 < 14 / 15 = 0.933: dot 15, wrong.
    item02 is its class's drawing (cos 1 either way): error 0% inverted, 50% not."""
    return write_run(root, "run01", {"class01": ROWS[0], "class02": {15}},
                     [("item01", {0}, "class01"), ("item02", {15}, "class02")])


def zip_runs(folder: Path, path: Path, top: str = "") -> Path:
    """A zip of ``folder``'s contents as all_runs.zip holds them: ``run01/``, ``run01/class_labels.txt``, ...
    at its top (folders as their own entries, as the release's), or under ``top/`` when given."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member in sorted(folder.rglob("*")):
            archive.write(member, f"{top}/{member.relative_to(folder)}" if top else member.relative_to(folder))
    return path
