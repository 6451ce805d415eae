"""Decoded images: decode once, read many times.

Every image goes through one decode path, :func:`decode`: read the file (PIL's JPEG draft mode scales the
DCT when the target is at most half the stored size), convert to the data set's mode, flip the polarity
of dark-stroke drawings, and shrink the short side to the preset's load size (never enlarge). Then:

- a data set whose decoded images fit :data:`MEMORY_BUDGET` is decoded once into one uint8 buffer
  (:class:`PackedImages` in memory) and kept per process, so every trial a Ray actor runs reuses it;
- a larger one is read through ``image_cache=DIR`` when set: the same buffer as a file, written once
  (atomically, under a lock) and memory-mapped by every trial and sweep after (:class:`MappedImages`);
- otherwise images are decoded on the fly (:class:`LiveImages`), still through :func:`decode`.

How a reader reaches DataLoader workers: forked workers (Linux's default before Python 3.14) inherit it and
share its pages copy-on-write. Workers started by ``spawn`` or ``forkserver`` (macOS; Linux from Python 3.14)
receive it by pickle, and none of the three pickles its pixels: the in-memory buffer moves once into shared
memory on the first such pickle and every worker maps it (:mod:`xbm.data.shared`); the disk cache pickles as
its folder, which the worker memory-maps itself; a live reader carries its source's paths.

All three return the same pixels for the same sample (tested), so a cache never changes results.

A file that cannot be decoded raises :class:`xbm.errors.BadImageError` (``on_bad_image=stop``: nothing is
cached). With ``skip=True`` (``on_bad_image=skip``) the reader's ``skipped`` lists such samples instead:
the pack holds an empty entry for each (so its pixels equal a decode without them), a live reader finds
them in one decode pass up front, and the disk cache records them with their files' size and time, so a
cache is reused only while those files are unchanged (:mod:`xbm.data.bad_images` drops them from the splits).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from filelock import FileLock
from PIL import Image

from xbm.data.bad_images import stamp, unchanged
from xbm.data.preprocess import decode_image
from xbm.data.shared import SharedArray
from xbm.data.sources import ArrayImageSource, SampleSource
from xbm.data.style import ImageStyle
from xbm.errors import BadImageError
from xbm.runtime.cpus import available_cpus

MEMORY_BUDGET = 2 * 1024**3
CACHE_FORMAT = 2  # 2: records the skipped samples (empty entries)
AHEAD_PER_THREAD = 4  # decoded images waiting per decode thread (_threaded)
_ASPECT_ALLOWANCE = 4 / 3  # photos are rarely longer than 4:3 once the short side is fixed


def decode(source: SampleSource, j: int, style: ImageStyle, load_size: int) -> Image.Image:
    """Sample ``j`` of ``source`` as the model's pixels before augmentation (see the module docstring; the
    one definition is :func:`xbm.data.preprocess.decode_image`)."""
    return decode_image(source.load(j, min_size=load_size), style.mode, style.invert, load_size)


class LiveImages:
    """Decode on every read (data sets too large for memory, without ``image_cache``)."""

    def __init__(self, source: SampleSource, style: ImageStyle, load_size: int) -> None:
        self.source, self.style, self.load_size = source, style, load_size
        self.skipped: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.source)

    def __call__(self, j: int) -> Image.Image:
        return decode(self.source, j, self.style, self.load_size)


class PackedImages:
    """N uint8 images of any sizes in one flat buffer: image ``j`` is ``pixels[offsets[j]:offsets[j+1]]``
    shaped ``shapes[j]`` ([H, W] grey or [H, W, 3] RGB). ``skipped``: samples left out (their entries are
    empty). The three arrays are :class:`~xbm.data.shared.SharedArray`: workers map them, never copy them."""

    def __init__(self, pixels: np.ndarray, offsets: np.ndarray, shapes: np.ndarray, mode: str,
                 skipped: tuple[int, ...] = ()) -> None:
        self._pixels, self._offsets, self._shapes = SharedArray(pixels), SharedArray(offsets), SharedArray(shapes)
        self.mode = mode
        self.skipped = tuple(int(j) for j in skipped)

    # Read through the SharedArrays on every access: their arrays are rebound when they move to shared memory.
    @property
    def pixels(self) -> np.ndarray:
        return self._pixels.array

    @property
    def offsets(self) -> np.ndarray:
        return self._offsets.array

    @property
    def shapes(self) -> np.ndarray:
        return self._shapes.array

    def __len__(self) -> int:
        return len(self.shapes)

    def array(self, j: int) -> np.ndarray:
        h, w = self.shapes[j]
        shape = (h, w) if self.mode == "L" else (h, w, 3)
        offsets = self.offsets
        return self.pixels[offsets[j]: offsets[j + 1]].reshape(shape)

    def __call__(self, j: int) -> Image.Image:
        return Image.fromarray(np.ascontiguousarray(self.array(j)), self.mode)

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1])


class MappedImages(PackedImages):
    """The disk cache at ``folder`` (``index.npz`` and ``pixels.u8``), its pixels a read-only memmap. Pickled as
    the folder (under any pickler): a worker maps the file itself, and finds it rewritten (another run's
    ``on_bad_image`` repair) by ``index.npz``'s inode and time, rather than read other images."""

    def __init__(self, folder: Path, expected: Optional[tuple[int, int]] = None) -> None:
        self.folder = Path(os.path.abspath(folder))
        index_file = self.folder / "index.npz"
        found = os.stat(index_file)
        self.identity = (found.st_ino, found.st_mtime_ns)
        if expected is not None and tuple(expected) != self.identity:
            raise ValueError(f"the disk image cache {self.folder} must be the one this run opened (index.npz inode "
                             f"and time {tuple(expected)}), but it was rewritten since ({self.identity}), by another "
                             "run repairing skipped images: start this run again")
        with np.load(index_file) as index:
            offsets, shapes, mode, skipped = (index[k] for k in ("offsets", "shapes", "mode", "skipped"))
        pixels = (np.memmap(self.folder / "pixels.u8", dtype=np.uint8, mode="r") if offsets[-1]
                  else np.zeros(0, np.uint8))   # an empty file cannot be mapped
        super().__init__(pixels, offsets, shapes, str(mode), tuple(skipped))

    def __reduce__(self):
        return MappedImages, (self.folder, self.identity)


def _threaded(fn: Callable, n: int, threads: int):
    """``fn(j)`` for j in 0..n-1, in order; threads overlap file reads and decoding (PIL releases the GIL)."""
    if threads <= 1:
        yield from map(fn, range(n))
        return
    # At most AHEAD_PER_THREAD results per thread wait for the consumer: Executor.map submits every task at
    # once, so decoded images piled up in memory whenever the consumer (the disk cache's writer on a slow
    # disk, NFS) was slower than the decoding: gigabytes for SOP.
    with ThreadPoolExecutor(threads) as pool:
        ahead: deque = deque()
        for j in range(n):
            ahead.append(pool.submit(fn, j))
            if len(ahead) >= threads * AHEAD_PER_THREAD:
                yield ahead.popleft().result()
        while ahead:
            yield ahead.popleft().result()


def _decoded_arrays(images: LiveImages, threads: int, skip: bool = False):
    """Decoded arrays in sample order; with ``skip``, None for a sample whose file cannot be decoded."""
    def one(j: int) -> Optional[np.ndarray]:
        try:
            return np.asarray(images(j), dtype=np.uint8)
        except BadImageError:
            if not skip:
                raise
            return None
    return _threaded(one, len(images), threads)


def bad_samples(images: LiveImages, threads: int) -> tuple[int, ...]:
    """The samples whose file cannot be decoded: one decode pass (no pixels kept) with the decode threads."""
    def bad(j: int) -> bool:
        try:
            images(j)
        except BadImageError:
            return True
        return False
    return tuple(j for j, is_bad in enumerate(_threaded(bad, len(images), threads)) if is_bad)


def _empty(mode: str) -> np.ndarray:
    return np.zeros((0, 0) if mode == "L" else (0, 0, 3), dtype=np.uint8)


def pack_in_memory(images: LiveImages, threads: int = 1, skip: bool = False) -> PackedImages:
    arrays = list(_decoded_arrays(images, threads, skip))
    skipped = tuple(j for j, a in enumerate(arrays) if a is None)
    arrays = [_empty(images.style.mode) if a is None else a for a in arrays]
    sizes = np.array([a.size for a in arrays], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    pixels = np.concatenate([a.reshape(-1) for a in arrays]) if arrays else np.zeros(0, np.uint8)
    shapes = np.array([a.shape[:2] for a in arrays], dtype=np.int64).reshape(-1, 2)
    return PackedImages(pixels, offsets, shapes, images.style.mode, skipped)


def estimated_bytes(source: SampleSource, style: ImageStyle, load_size: int) -> int:
    """An upper estimate of the decoded buffer, without decoding everything."""
    if isinstance(source, ArrayImageSource):
        per = min(int(np.prod(source.images.shape[1:3])), int(load_size**2 * _ASPECT_ALLOWANCE))
    else:
        per = int(load_size**2 * _ASPECT_ALLOWANCE)
    return len(source) * per * style.channels


def open_disk_cache(folder: Path, key: dict, images: LiveImages, threads: int, skip: bool = False) -> MappedImages:
    """The packed file for ``key`` under ``folder``, written first if absent or not reusable (a cache that
    skipped samples: under ``skip`` only while their files are unchanged, never without it). Writers
    hold a lock, write under a temporary name and rename, so readers never see a partial cache and two
    trials never both decode the data set.

    The lock is ``filelock.FileLock`` on ``.<cache name>.lock`` in ``folder``, waited for without a timeout:
    on Linux and macOS an exclusive ``flock`` (what this function took by hand before, so an older copy's
    writer and this one still exclude each other), on Windows ``msvcrt.locking`` (``fcntl`` does not exist
    there). Like every ``flock`` it excludes the processes (and threads) of one machine, and NFS clients only
    where the mount supports it."""
    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    final = folder / f"{key['dataset']}-{key['load_size']}-{digest}"
    with FileLock(folder / f".{final.name}.lock"):   # blocks while another writer holds it
        if not _reusable(final, images.source, skip):
            _write(final, key, images, threads, skip)
    return MappedImages(final)


def _reusable(final: Path, source: SampleSource, skip: bool) -> bool:
    if not (final / "index.npz").is_file():
        return False
    recorded = json.loads((final / "key.json").read_text()).get("skipped", [])
    return not recorded or (skip and unchanged(source, recorded))


def _write(final: Path, key: dict, images: LiveImages, threads: int, skip: bool) -> None:
    # Under the lock no one else writes: a temporary folder left here was a killed writer's (SIGKILL, an
    # out-of-memory kill, a preempted node never reach the clean-up below), up to 31 GB for SOP at 224 px.
    for stale in final.parent.glob(f"{final.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = final.with_name(final.name + f".tmp-{os.getpid()}")
    tmp.mkdir()
    offsets, shapes, skipped = [0], [], []
    try:
        with open(tmp / "pixels.u8", "wb") as out:
            for j, array in enumerate(_decoded_arrays(images, threads, skip)):
                if array is None:
                    skipped.append(j)
                    array = _empty(images.style.mode)
                out.write(array.tobytes())
                offsets.append(offsets[-1] + array.size)
                shapes.append(array.shape[:2])
            out.flush()
            os.fsync(out.fileno())  # on disk before the rename says the cache is whole (a node that crashes)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # on_bad_image=stop: nothing is written
        raise
    np.savez(tmp / "index.npz", offsets=np.asarray(offsets, dtype=np.int64),
             shapes=np.asarray(shapes, dtype=np.int64).reshape(-1, 2), mode=np.str_(images.style.mode),
             skipped=np.asarray(skipped, dtype=np.int64))
    with open(tmp / "index.npz", "rb") as index:
        os.fsync(index.fileno())
    stamps = [stamp(images.source, j) for j in skipped]
    (tmp / "key.json").write_text(json.dumps({**key, "format": CACHE_FORMAT, "skipped": stamps}, indent=1))
    shutil.rmtree(final, ignore_errors=True)
    os.rename(tmp, final)


def image_store(source: SampleSource, style: ImageStyle, load_size: int, key: dict, cache_dir: str = "",
                budget: Optional[int] = None, threads: Optional[int] = None, skip: bool = False) -> Callable:
    """The fastest faithful reader of decoded images: in memory (up to ``budget`` bytes, default
    :data:`MEMORY_BUDGET`), on disk, or live (module docstring); its ``skipped``: the samples left out."""
    budget = MEMORY_BUDGET if budget is None else budget
    images = LiveImages(source, style, load_size)
    threads = threads if threads is not None else min(8, available_cpus())  # the process's affinity
    if estimated_bytes(source, style, load_size) <= budget:
        return pack_in_memory(images, threads, skip)
    if cache_dir:
        return open_disk_cache(Path(cache_dir), {**key, "format": CACHE_FORMAT}, images, threads, skip)
    if skip:
        images.skipped = bad_samples(images, threads)
    return images
