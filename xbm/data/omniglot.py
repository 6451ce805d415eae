"""``omniglot``: hand-drawn characters (Lake, Salakhutdinov and Tenenbaum, "Human-level concept learning
through probabilistic program induction", Science 350, 2015). 50 alphabets, 1,623 characters, 20 drawings
each, 105x105 1-bit PNG.

Reads the official ``<Alphabet>/characterNN/<drawing>_<drawer>.png`` layout anywhere under ``data_root``:
from the release's zip files (images_background.zip, images_evaluation.zip, images_background_small1/2.zip)
without extracting, and from extracted folders. A drawing present twice (Greek and Latin are in both small
zips; a zip next to its extracted folder) is read once. Class = (alphabet, character); super-class =
alphabet. Black strokes on white: decoded grey and inverted, so strokes are high on a 0 background
(:data:`xbm.data.style.DARK_STROKES`). Classes, never drawings, are split: in each alphabet the first
half of the characters (in character order, the larger half when odd) trains, the rest is the test split
(leave-one-out retrieval).

Each drawing's drawer is read from its file name (``<drawing>_<drawer>.png``): one-shot episodes
(:mod:`xbm.data.episodes`) take their training and test drawings from two drawers, as the real runs do.
``omniglot_rotations=4`` makes each 90-degree rotation of a character a class of its own (Vinyals et al.,
"Matching networks for one shot learning", NeurIPS 2016; Snell et al., "Prototypical networks", NeurIPS 2017):
sample ``k * n + j`` is drawing ``j`` turned ``k`` quarter turns (:class:`~xbm.data.sources.RotatedSource`), its
class ``(alphabet, character, k)``, its super-class still the alphabet; the four rotations of a character form
one class group, so they always share a split.
"""
from __future__ import annotations

import zipfile
from pathlib import Path, PurePosixPath

import numpy as np

from xbm.data.base import RawData
from xbm.data.layout import require_root
from xbm.data.sources import RotatedSource, ZipImageSource
from xbm.data.splits import encode
from xbm.data.style import DARK_STROKES
from xbm.errors import BadImageError, DatasetNotFoundError

# Recall@K reported here (no paper's set adopted); ``eval_ks`` overrides it.
RECALL_KS = (1, 10)

LAYOUT = """\
<data_root>/
  images_background.zip          (and/or images_evaluation.zip, images_background_small1.zip, ...)
    images_background/Alphabet_of_the_Magi/character01/0709_01.png
  images_evaluation/             (extracted folders work too)
    Angelic/character01/0965_01.png
    ..."""


def _drawing_key(path: PurePosixPath):
    """(alphabet, character, file name) for an official-layout PNG path, else None."""
    parts = path.parts
    if len(parts) < 3 or path.suffix.lower() != ".png" or not parts[-2].startswith("character"):
        return None
    return parts[-3], parts[-2], parts[-1]


def scan(root: Path) -> tuple[list, np.ndarray, list, list]:
    """Every distinct drawing under ``root``: (archives, archive index, member or file path, key), sorted
    by key. Zips come first, so a drawing in both a zip and a folder is read from the zip."""
    archives: list = []
    found: dict[tuple, tuple[int, str]] = {}
    for zip_path in sorted(root.rglob("*.zip")):
        try:
            with zipfile.ZipFile(zip_path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError) as exc:  # zipfile's errors never name the archive
            raise BadImageError.unreadable_file("omniglot", zip_path, root, exc) from exc
        archives.append(str(zip_path))
        for name in names:
            key = _drawing_key(PurePosixPath(name))
            if key is not None:
                found.setdefault(key, (len(archives) - 1, name))
    archives.append(None)  # plain files
    for png in sorted(root.rglob("*.png")):
        key = _drawing_key(PurePosixPath(png.relative_to(root).as_posix()))
        if key is not None:
            found.setdefault(key, (len(archives) - 1, str(png)))
    keys = sorted(found)
    return archives, np.array([found[k][0] for k in keys], dtype=np.int64), [found[k][1] for k in keys], keys


def _character_number(character: str):
    digits = character[len("character"):]
    return (int(digits), character) if digits.isdigit() else (10**9, character)


def build_omniglot(cfg) -> RawData:
    root = require_root(cfg, "omniglot", LAYOUT)
    archives, archive_of, members, keys = scan(root)
    if not keys:
        raise DatasetNotFoundError("omniglot", root / "images_background.zip", LAYOUT,
                                   "No <Alphabet>/characterNN/*.png drawing was found in any zip or folder "
                                   "under data_root: put the release's zip files (or their extracted "
                                   "folders) there.")
    characters: dict[str, set] = {}
    for alphabet, character, _ in keys:
        characters.setdefault(alphabet, set()).add(character)
    train_classes: set[tuple[str, str]] = set()
    for alphabet, chars in characters.items():
        ordered = sorted(chars, key=_character_number)
        train_classes.update((alphabet, c) for c in ordered[: (len(ordered) + 1) // 2])
    classes = [(a, c) for a, c, _ in keys]
    is_train = np.array([k in train_classes for k in classes])
    drawers = encode([(a, _drawer(name)) for a, _, name in keys])
    source = ZipImageSource(archives, archive_of, members, "omniglot", root)
    turns = int(getattr(cfg, "omniglot_rotations", 1))
    n = len(keys)
    turn = np.repeat(np.arange(turns), n)          # sample k * n + j: drawing j turned k quarter turns
    rotated = [(a, c, int(k)) for k, (a, c) in zip(turn, classes * turns)]
    alphabets = sorted({a for a, _ in classes})
    return RawData(name="omniglot", source=RotatedSource(source, turns) if turns > 1 else source,
                   labels=encode(rotated), train=np.flatnonzero(np.tile(is_train, turns)),
                   query=np.flatnonzero(~np.tile(is_train, turns)),
                   superlabels=encode([a for a, _ in classes] * turns), style=DARK_STROKES,
                   drawers=np.tile(drawers, turns), rotations=turn if turns > 1 else None,
                   class_groups=np.tile(encode(classes), turns) if turns > 1 else None,
                   superclass_names=tuple(alphabets))


def _drawer(name: str) -> str:
    """The drawer of ``<drawing>_<drawer>.png``; the whole name when it has no such part (a drawer of its own)."""
    stem = PurePosixPath(name).stem
    return stem.rsplit("_", 1)[1] if "_" in stem else stem
