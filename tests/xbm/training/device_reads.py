"""A CPU stand-in for CUDA's sync debug mode: :class:`DeviceReads` records, at the level of aten ops, everything
that on a GPU would make the CPU wait for the device or copy a value from the host, with the line of this
repository it came from. C++ callers count too (PML, torch.optim), since the dispatch mode sees their ops.

What it records (aten names as torch 2.14 dispatches them on the CPU):

- a value read back: ``_local_scalar_dense`` (``item``, ``bool``, ``float``, ``int``), ``equal``;
- an output whose size depends on the data, so the host must read the size: ``nonzero`` (``torch.where(mask)``,
  ``argwhere``), ``masked_select``, every ``unique`` (``_unique``, ``_unique2``, ``unique_dim``,
  ``unique_consecutive``, with or without ``dim``), ``bincount``, ``repeat_interleave``, and indexing or
  index assignment with a boolean mask (``index`` / ``index_put_`` with a bool index: ``nonzero`` inside);
- a Python scalar, list or NumPy array becoming a tensor: ``lift_fresh`` (``torch.tensor([...])``,
  ``torch.from_numpy``, and ``t[i] = False``, which dispatches ``lift_fresh``, ``select``, then ``copy_`` from
  the new 0-dim CPU tensor). On CUDA that value crosses from the host: ``t[i] = False`` on a device tensor is a
  blocking host-to-device copy, which waits for the device (CUDA's sync debug mode raises on it);
- values copied to the host by calls that dispatch no aten op of their own, seen by a function mode:
  ``tolist``, ``numpy``, ``cpu``.

The CPU cannot tell a tensor meant for the host from one on the device: host-side work by design (MoCo's batch
layout, built on the CPU on every device) shows up too, and a test names it by site.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

HERE = Path(__file__).resolve()
REPO = HERE.parents[3]

DATA_DEPENDENT = {"_local_scalar_dense", "equal", "nonzero", "nonzero_numpy", "masked_select", "_unique", "_unique2",
                  "unique_dim", "unique_consecutive", "bincount", "repeat_interleave"}
FROM_HOST = {"lift_fresh", "lift_fresh_copy"}
TO_HOST = {"tolist", "numpy", "cpu"}
INDEXING = {"index", "index_put", "index_put_", "_index_put_impl_"}


class Read(NamedTuple):
    """One recorded op and its site: ``path:qualified function`` of the innermost frame in this repository."""

    op: str
    site: str

    def __str__(self) -> str:
        return f"{self.op} at {self.site}"


class DeviceReads(TorchDispatchMode):
    """Records :class:`Read` s into ``steps[-1]`` while ``counting``; ``new_step()`` opens the next step."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[list[Read]] = [[]]
        self.counting = True
        self._python = _PythonReads(self)

    @property
    def reads(self) -> list[Read]:
        return [read for step in self.steps for read in step]

    @property
    def ops(self) -> list[str]:
        return [read.op for read in self.reads]

    def new_step(self) -> None:
        self.steps.append([])

    def note(self, op: str) -> None:
        if self.counting:
            self.steps[-1].append(Read(op, _site()))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in DATA_DEPENDENT or name in FROM_HOST:
            self.note(name)
        elif name in INDEXING and any(t is not None and t.dtype == torch.bool for t in args[1]):
            self.note(f"{name} with a boolean mask")
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        self._python.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._python.__exit__(*exc)


class _PythonReads(TorchFunctionMode):
    """The half of :class:`DeviceReads` that sees the reads dispatching no aten op (``tolist``, ...)."""

    def __init__(self, reads: DeviceReads) -> None:
        super().__init__()
        self.reads = reads

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", None) in TO_HOST:
            self.reads.note(func.__name__)
        return func(*args, **(kwargs or {}))


def _site() -> str:
    """The innermost caller in this repository, this file and a virtual environment inside it excluded."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        path = Path(code.co_filename)
        if path != HERE and path.is_relative_to(REPO) and "site-packages" not in path.parts:
            return f"{path.relative_to(REPO)}:{code.co_qualname}"
        frame = frame.f_back
    return "outside the repository"


def stepped(batches: Iterable, reads: DeviceReads) -> Iterator:
    """``batches``, each opening a new step of ``reads``, with counting paused while the next batch is fetched
    (the data side, collation and the loader, is not the step). After the last batch, one more step collects
    the epoch's end: ``reads.steps`` is [before the first batch, step 1, ..., step n, the epoch's end]."""
    for batch in batches:
        reads.new_step()
        reads.counting = True
        yield batch
        reads.counting = False
    reads.new_step()
    reads.counting = True
