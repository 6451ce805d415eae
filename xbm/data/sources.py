"""Random access to raw samples: ``load(j)`` -> PIL RGB image (``input_kind == "image"``) or float tensor.

``load(j, min_size=s)`` may return a smaller image whose short side (of the annotated box, if any) is
still at least ``s``: JPEG files are then decoded in PIL's draft mode, which scales the DCT by 1/2, 1/4 or
1/8 and costs a fraction of a full decode. Other sources ignore it.

Sources hold only cheap things (arrays, paths, boxes), and hold their arrays and path lists as
:class:`~xbm.data.shared.SharedArray` and :class:`~xbm.data.shared.StringTable`, so a data set of any size
pickles small into DataLoader workers (they map the values); zip handles are reopened in each process.
"""
from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from PIL import Image

from xbm.data.shared import SharedArray, StringTable
from xbm.errors import BadImageError, DatasetNotFoundError


class SampleSource:
    """Base: ``len(source)`` samples, ``load(j)`` decodes sample ``j``."""

    input_kind = "image"

    def __len__(self) -> int:
        raise NotImplementedError

    def load(self, j: int, min_size: Optional[int] = None):
        raise NotImplementedError

    def where(self, j: int) -> str:
        """Where sample ``j`` is read from, for messages (a file, or an archive and its member)."""
        return f"sample {j}"

    def file_of(self, j: int) -> Optional[str]:
        """The file sample ``j`` is read from (None: in memory): its size and time key decoded caches."""
        return None


class VectorSource(SampleSource):
    """Rows of a float tensor [N, D]; ``load(j)`` returns row ``j`` (float32)."""

    input_kind = "vector"

    def __init__(self, vectors: torch.Tensor) -> None:
        if vectors.ndim != 2:
            raise ValueError(f"vectors must be 2-D [N, D], but got shape {tuple(vectors.shape)}")
        # An own copy: torch moves a tensor into shared memory in place when a worker receives it, and a NumPy
        # view the caller took of a shared original would then read freed memory.
        self.vectors = vectors.to(torch.float32, copy=True).contiguous()

    def __len__(self) -> int:
        return self.vectors.shape[0]

    def load(self, j: int, min_size: Optional[int] = None) -> torch.Tensor:
        return self.vectors[j]


class ArrayImageSource(SampleSource):
    """In-memory uint8 images [N, H, W] (grey) or [N, H, W, 3] (RGB); ``load`` returns PIL RGB."""

    def __init__(self, images: np.ndarray) -> None:
        if images.dtype != np.uint8 or images.ndim not in (3, 4):
            raise ValueError(f"images must be uint8 [N, H, W] or [N, H, W, 3], but got "
                             f"{images.dtype} {images.shape}")
        self._images = SharedArray(images)

    @property
    def images(self) -> np.ndarray:
        return self._images.array   # read afresh: rebound when the values move to shared memory

    def __len__(self) -> int:
        return self.images.shape[0]

    def load(self, j: int, min_size: Optional[int] = None) -> Image.Image:
        return Image.fromarray(self.images[j]).convert("RGB")


class ImageFileSource(SampleSource):
    """Image files ``root / relpath``, optionally cropped to a box (x1, y1, x2, y2) in pixels."""

    def __init__(self, root, relpaths: Sequence[str], boxes: Optional[np.ndarray] = None,
                 dataset: str = "images", layout: str = "") -> None:
        if boxes is not None and len(boxes) != len(relpaths):
            raise ValueError(f"boxes must have one row per image, but got {len(boxes)} boxes for "
                             f"{len(relpaths)} images")
        self.root = Path(root)
        self.relpaths = StringTable(relpaths)
        self._boxes = None if boxes is None else SharedArray(np.asarray(boxes, dtype=np.float64))
        self.dataset, self.layout = dataset, layout

    @property
    def boxes(self) -> Optional[np.ndarray]:
        return None if self._boxes is None else self._boxes.array

    def __len__(self) -> int:
        return len(self.relpaths)

    def load(self, j: int, min_size: Optional[int] = None) -> Image.Image:
        path = self.root / self.relpaths[j]
        try:
            with Image.open(path) as image:
                scale = self._draft(image, j, min_size)
                image = image.convert("RGB")
        except FileNotFoundError:
            raise DatasetNotFoundError(self.dataset, path, self.layout or f"{self.root}/<listed images>",
                                       "An image listed in the annotation files is missing: re-extract "
                                       "the release's images.") from None
        except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, zlib.error... on a bad file
            raise BadImageError.of(self.dataset, path, self.root, exc) from exc
        if self.boxes is not None:
            x1, y1, x2, y2 = self.boxes[j] * scale
            # Clamp to the image and keep at least one pixel: some annotated boxes touch or cross the border.
            x1, y1 = min(max(x1, 0), image.width - 1), min(max(y1, 0), image.height - 1)
            x2, y2 = max(min(x2, image.width), x1 + 1), max(min(y2, image.height), y1 + 1)
            image = image.crop((int(x1), int(y1), int(round(x2)), int(round(y2))))
        return image

    def _draft(self, image: Image.Image, j: int, min_size: Optional[int]) -> float:
        """Ask a JPEG for draft decoding when ``min_size`` is at most half the needed region; the factor
        by which the image shrank (1.0 when not)."""
        if not min_size or image.format != "JPEG":
            return 1.0
        w, h = image.size
        box_w, box_h = (w, h) if self.boxes is None else (self.boxes[j, 2] - self.boxes[j, 0],
                                                          self.boxes[j, 3] - self.boxes[j, 1])
        shrink = min(box_w, box_h) / min_size
        if shrink < 2:
            return 1.0
        # draft keeps the image at least as large as asked: ask for the size at which the box's short
        # side is min_size
        image.draft("RGB", (int(np.ceil(w / shrink)), int(np.ceil(h / shrink))))
        return image.size[0] / w

    def where(self, j: int) -> str:
        return str(self.root / self.relpaths[j])

    file_of = where


class ZipImageSource(SampleSource):
    """Images read from inside zip archives without extracting: sample ``j`` is ``members[j]`` of
    ``archives[archive_of[j]]``; an archive of None means a plain file path in ``members[j]``. ``dataset``
    and ``root`` name the data set in errors."""

    def __init__(self, archives: Sequence[Optional[str]], archive_of: np.ndarray, members: Sequence[str],
                 dataset: str = "images", root: str | os.PathLike[str] = "") -> None:
        self.dataset, self.root = dataset, str(root)
        self.archives = list(archives)   # a few archives: a list
        self._archive_of = SharedArray(np.asarray(archive_of, dtype=np.int64))
        self.members = StringTable(members)
        self._handles: dict[int, zipfile.ZipFile] = {}
        self._pid = os.getpid()

    @property
    def archive_of(self) -> np.ndarray:
        return self._archive_of.array

    def __len__(self) -> int:
        return len(self.members)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_handles"] = {}  # zip handles do not cross processes; each worker reopens its own
        return state

    def _archive(self, a: int) -> zipfile.ZipFile:
        if self._pid != os.getpid():  # forked worker: never share the parent's file offsets
            self._handles, self._pid = {}, os.getpid()
        if a not in self._handles:
            self._handles[a] = zipfile.ZipFile(self.archives[a])
        return self._handles[a]

    def load(self, j: int, min_size: Optional[int] = None) -> Image.Image:
        a = int(self.archive_of[j])
        try:
            if self.archives[a] is None:
                with Image.open(self.members[j]) as image:
                    return image.convert("RGB")
            with self._archive(a).open(self.members[j]) as handle:
                with Image.open(handle) as image:
                    return image.convert("RGB")
        except FileNotFoundError:
            raise
        except Exception as exc:  # a bad drawing, or a bad member of a zip (CRC, truncated archive)
            raise BadImageError.of(self.dataset, self.where(j), self.root, exc) from exc

    def where(self, j: int) -> str:
        a = int(self.archive_of[j])
        return self.members[j] if self.archives[a] is None else f"{self.archives[a]}:{self.members[j]}"

    def file_of(self, j: int) -> Optional[str]:
        a = int(self.archive_of[j])
        return self.members[j] if self.archives[a] is None else self.archives[a]


class RotatedSource(SampleSource):
    """Every sample of ``base`` in ``turns`` orientations: sample ``k * n + j`` (``n = len(base)``) is base sample
    ``j`` turned ``k`` quarter turns counter-clockwise, as ``numpy.rot90(pixels, k)`` turns an array. A decoded
    cache over it rotates each image once, when it decodes it."""

    _TURNS = (None, Image.Transpose.ROTATE_90, Image.Transpose.ROTATE_180, Image.Transpose.ROTATE_270)

    def __init__(self, base: SampleSource, turns: int = 4) -> None:
        if not 1 <= turns <= 4:
            raise ValueError(f"turns must be 1 to 4 (quarter turns of a sample), but got {turns}")
        self.base, self.turns = base, turns
        self.input_kind = base.input_kind

    def __len__(self) -> int:
        return len(self.base) * self.turns

    def split(self, j: int) -> tuple[int, int]:
        """(quarter turns, base sample) of sample ``j``."""
        return divmod(int(j), len(self.base))

    def load(self, j: int, min_size: Optional[int] = None):
        turns, i = self.split(j)
        image = self.base.load(i, min_size)
        return image if turns == 0 else image.transpose(self._TURNS[turns])

    def where(self, j: int) -> str:
        turns, i = self.split(j)
        return self.base.where(i) + (f" (turned {90 * turns} degrees)" if turns else "")

    def file_of(self, j: int) -> Optional[str]:
        return self.base.file_of(self.split(j)[1])
