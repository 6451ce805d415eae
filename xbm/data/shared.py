"""Arrays that DataLoader workers map instead of copying.

A loader whose workers start with ``spawn`` or ``forkserver`` (macOS's default, and Linux's from Python 3.14)
hands each worker its data set by pickle (:class:`multiprocessing.reduction.ForkingPickler`): an array held by
value is copied into every worker (a 2.9 GB decoded pack, 15 times). :class:`SharedArray` pickles there as a
handle to shared memory, the way torch sends its tensors: on its first such pickle its values move once into a
torch tensor in shared memory (torch's own reduction then sends a file descriptor), and every worker maps that.

Under ``fork`` nothing is pickled, so nothing moves: workers share the pages copy-on-write, and /dev/shm (64 MB
in a Docker container by default) holds nothing of ours. Any other pickler (checkpoints, Ray, :mod:`copy`)
gets the values. :class:`StringTable` does the same for a long list of strings (SOP's 120,053 paths).
"""
from __future__ import annotations

from multiprocessing.reduction import ForkingPickler
from typing import Iterator, Optional, Sequence, Union

import numpy as np
import torch

from xbm.errors import SharedMemoryError


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    try:
        return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    except TypeError:
        raise ValueError(f"a SharedArray must hold a dtype torch can hold (bool, ints, floats, native byte "
                         f"order), but got {dtype}") from None


class SharedArray:
    """``array``, a NumPy array (held, not copied), that loader workers receive by shared-memory handle.

    ``array`` is rebound, never written, when the values move: read it afresh rather than keep it."""

    def __init__(self, array: np.ndarray) -> None:
        array = np.asanyarray(array)   # any subclass kept: a disk cache's memmap stays one
        _torch_dtype(array.dtype)
        self.array = array
        self._tensor: Optional[torch.Tensor] = None   # set once the values live in shared memory

    def __len__(self) -> int:
        return len(self.array)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return np.array(self.array, dtype=dtype, copy=True) if copy else np.asarray(self.array, dtype=dtype)

    @property
    def is_shared(self) -> bool:
        return self._tensor is not None

    def share(self) -> torch.Tensor:
        """The values as a tensor in shared memory: moved there on the first call (one copy), then rebound."""
        if self._tensor is None:
            shape, dtype = self.array.shape, _torch_dtype(self.array.dtype)
            try:
                # Allocated in shared memory before anything views it: share_memory_ on a filled tensor swaps
                # its data pointer, and a NumPy view taken before would then read freed memory.
                tensor = torch.empty(shape, dtype=dtype).share_memory_()
            except RuntimeError as exc:
                raise SharedMemoryError(
                    f"loader workers started by spawn or forkserver map the data set from shared memory, but "
                    f"{self.array.nbytes / 2**20:.0f} MiB more did not fit ({exc}). Give /dev/shm more room "
                    "(docker run --shm-size=8g or --ipc=host), start the workers with fork (they then share the "
                    "parent's memory: multiprocessing.set_start_method('fork')), or set num_workers=0") from exc
            tensor.numpy()[...] = self.array
            self._tensor, self.array = tensor, tensor.numpy()
        return self._tensor

    def __reduce__(self):
        return SharedArray, (np.asarray(self.array),)   # any pickler but a worker's: the values


def _by_handle(shared: SharedArray):
    return _rebuild, (shared.share(),)   # torch's reduction sends the tensor as a handle


def _rebuild(tensor: torch.Tensor) -> SharedArray:
    shared = SharedArray.__new__(SharedArray)
    shared._tensor, shared.array = tensor, tensor.numpy()
    return shared


# Beside the class, as torch registers its tensors' reductions: every process that can hold a SharedArray
# has imported this module.
ForkingPickler.register(SharedArray, _by_handle)


class StringTable:
    """A sequence of strings as one UTF-8 buffer and its offsets, both :class:`SharedArray`: item ``i`` is
    ``buffer[offsets[i]:offsets[i + 1]]`` decoded. ``surrogatepass`` keeps any Python string exact (file
    names that are not UTF-8 arrive from ``os`` with surrogates)."""

    def __init__(self, strings: Sequence[str]) -> None:
        encoded = [s.encode("utf-8", "surrogatepass") for s in strings]
        sizes = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
        self._buffer = SharedArray(np.frombuffer(b"".join(encoded), dtype=np.uint8))
        self._offsets = SharedArray(np.concatenate([np.zeros(1, np.int64), np.cumsum(sizes)]))

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: Union[int, slice]):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"string index {i} out of range for a table of {n} strings")
        i = int(i) % n
        offsets = self._offsets.array
        return self._buffer.array[offsets[i]: offsets[i + 1]].tobytes().decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"StringTable({len(self)} strings)"
