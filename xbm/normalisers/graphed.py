"""One normaliser call replayed as a CUDA graph once its inputs stop changing.

PC-XBN and SC-XBN launch about a hundred small kernels a call, and on an H100 the host's launches, not the
GPU's arithmetic, set their time: 2.42 ms a call for 0.99 ms of GPU work at 60,000 x 512, 3.6x XBN
(2026-11-27). Captured once, the call is one graph launch plus two small copies (the batch and its labels
into the captured buffers): 1.20 ms, 1.6x XBN, against 2.58 ms eager in the same run (docs/memory.md).

A graph holds the addresses it was captured with, so it is replayed only while the memory, its labels and
``out`` are the same tensors (address, shape, strides, dtype), the batch has the same shape and dtype, and the
options, the module's buffers and autocast are unchanged; the memory's ring buffer is all of these once it is
full (while it fills, ``valid()`` grows each step and every call stays eager). A graph runs the kernels its
capture recorded, the eager path's, so replays give the eager path's values. Each kept graph also keeps the
call's temporaries (the eager call frees them after each call) in a memory pool of its own.

The capture is taken on a side stream after ``after`` identical eager calls, the last of them on that stream
(cuBLAS keeps a workspace per stream, which must exist before a capture), in ``thread_local`` mode so that
the loader's pin-memory thread and the checkpoint writer's keep using CUDA meanwhile. Nothing synchronises:
the step stays free of host reads (tests/xbm/training/test_host_syncs.py). A trial whose inputs keep changing
captures at most ``max_captures`` times, then stays eager; the last ``keep`` graphs are kept.
"""
from __future__ import annotations

import warnings
from collections import OrderedDict
from typing import Any, Callable

import torch
from torch import Tensor

Run = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Any]


def _where(t: Tensor) -> tuple:
    return t.data_ptr(), t.shape, t.stride(), t.dtype, t.device


class GraphedCall:
    """``call(run, memory, memory_labels, batch, batch_labels, out, options)`` runs
    ``run(memory, memory_labels, batch, batch_labels, out)`` (which must write its result into ``out`` and
    read nothing back to the host), eagerly or as a replay of its CUDA graph. ``options``: anything else
    the result depends on (hashable; compared with ``==``). The last ``keep`` graphs are kept, so that a
    shorter last batch of an epoch does not cost the full batches their graph."""

    def __init__(self, after: int = 2, keep: int = 2, max_captures: int = 16) -> None:
        self.after, self.keep, self.max_captures = after, keep, max_captures
        self.captures = self.replays = 0
        self._graphs: OrderedDict[tuple, tuple[torch.cuda.CUDAGraph, tuple[Tensor, Tensor]]] = OrderedDict()
        self._key, self._seen, self._stream = None, 0, None

    def handles(self, memory: Tensor) -> bool:
        """Whether calls on ``memory`` go through here: CUDA graphs exist on CUDA devices only."""
        return memory.is_cuda

    def __call__(self, run: Run, memory: Tensor, memory_labels: Tensor, batch: Tensor, batch_labels: Tensor,
                 out: Tensor, options: tuple) -> None:
        key = (_where(memory), _where(memory_labels), _where(out), batch.shape, batch.dtype, batch_labels.shape,
               batch_labels.dtype, options, torch.is_autocast_enabled(memory.device.type))
        if key not in self._graphs:
            self._seen = self._seen + 1 if key == self._key else 1
            self._key = key
            if self._seen < self.after or self.captures >= self.max_captures:
                run(memory, memory_labels, batch, batch_labels, out)
                return
            if self._seen == self.after:   # the last eager call, on the stream the capture will use
                self._on_side_stream(lambda: run(memory, memory_labels, batch, batch_labels, out), memory.device)
                return
            if not self._capture(key, run, memory, memory_labels, batch, batch_labels, out):
                run(memory, memory_labels, batch, batch_labels, out)
                return
        self._graphs.move_to_end(key)
        graph, (static_batch, static_labels) = self._graphs[key]
        static_batch.copy_(batch)
        static_labels.copy_(batch_labels)
        graph.replay()
        self.replays += 1

    def _on_side_stream(self, work: Callable[[], Any], device: torch.device) -> None:
        if self._stream is None:
            self._stream = torch.cuda.Stream(device)
        here = torch.cuda.current_stream(device)
        self._stream.wait_stream(here)
        with torch.cuda.stream(self._stream):
            work()
        here.wait_stream(self._stream)

    def _capture(self, key: tuple, run: Run, memory: Tensor, memory_labels: Tensor, batch: Tensor,
                 batch_labels: Tensor, out: Tensor) -> bool:
        """Keep a graph of ``run`` on copies of the batch (nothing runs until a replay); False, with a
        warning and no more captures, when ``run`` cannot be captured."""
        self.captures += 1
        inputs = batch.clone(), batch_labels.clone()
        try:
            graph = self._record(lambda: run(memory, memory_labels, *inputs, out), memory.device)
        except RuntimeError as exc:
            self.captures = self.max_captures
            warnings.warn(f"the normaliser's call could not be captured as a CUDA graph ({exc}); it runs "
                          "eagerly from now on, with the same values, at the cost of its launches", stacklevel=3)
            return False
        self._graphs[key] = graph, inputs
        while len(self._graphs) > self.keep:
            self._graphs.popitem(last=False)
        return True

    def _record(self, work: Callable[[], Any], device: torch.device) -> torch.cuda.CUDAGraph:
        """``work`` captured on the side stream: its kernels recorded, none run."""
        graph = torch.cuda.CUDAGraph()

        def record():
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                work()
            finally:
                graph.capture_end()

        self._on_side_stream(record, device)
        return graph

    def __getstate__(self) -> dict:
        """A copy (``deepcopy``, pickling) starts eager: a graph and its stream cannot leave this process."""
        return {"after": self.after, "keep": self.keep, "max_captures": self.max_captures}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)
