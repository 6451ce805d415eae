"""Host copies of a training state for a checkpoint (:class:`HostBuffers`): made between two epochs, kept from
one save to the next, and for a GPU state packed per dtype so that a few copies move it instead of one per
tensor."""
from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

ALIGN_BYTES = 64   # each packed tensor starts on a 64-byte boundary: the vectorised loads of torch's foreach kernels


def on_a_device(tensor: torch.Tensor) -> bool:
    """The default of which tensors :class:`HostBuffers` packs: any not already in host memory."""
    return tensor.device.type != "cpu"


def cpu_copy(value: Any, copy_tensor: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``value`` with every tensor replaced by ``copy_tensor(tensor)`` and every other leaf deep-copied, through
    dicts, lists, tuples and named tuples, in one fixed order: a snapshot that the originals' in-place updates
    (the next optimiser step, the memory's next enqueue) cannot reach when ``copy_tensor`` copies."""
    if isinstance(value, torch.Tensor):
        return copy_tensor(value)
    if isinstance(value, dict):
        return type(value)((k, cpu_copy(v, copy_tensor)) for k, v in value.items())   # an OrderedDict stays one
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(cpu_copy(v, copy_tensor) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(cpu_copy(v, copy_tensor) for v in value)
    return copy.deepcopy(value)


def dense(tensor: torch.Tensor) -> bool:
    """Whether ``tensor``'s elements fill ``numel`` consecutive slots of its storage in some order of its
    dimensions (contiguous, channels-last, a transpose), so that a view with its strides into a packed buffer
    holds it exactly. A slice with gaps or a broadcast (stride 0) does not."""
    expected = 1
    for stride, size in sorted((s, n) for s, n in zip(tensor.stride(), tensor.shape) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


@dataclass
class _Pack:
    """One (device, dtype)'s host buffer and the views into it that hold the state's tensors of that kind, in
    the state's order, each laid out (shape, strides) as its source; kept while the layouts stay the same."""
    layouts: list[tuple]
    host: torch.Tensor
    pinned: bool
    offsets: list[int] = field(default_factory=list)
    views: list[torch.Tensor] = field(default_factory=list)

    @classmethod
    def for_layouts(cls, layouts: list[tuple], dtype: torch.dtype, pin: bool) -> "_Pack":
        align = max(1, ALIGN_BYTES // dtype.itemsize)
        offsets, size = [], 0
        for shape, _ in layouts:
            offsets.append(size)
            size += -(-torch.Size(shape).numel() // align) * align
        host, pinned = _pinned(functools.partial(torch.empty, size, dtype=dtype), pin)
        pack = cls(layouts, host, pinned, offsets)
        pack.views = pack.views_of(host)
        return pack

    def views_of(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return [flat.as_strided(shape, stride, offset) for (shape, stride), offset in zip(self.layouts, self.offsets)]


class HostBuffers:
    """The CPU tensors one file's snapshots are copied into, kept from one save to the next.

    Tensors on a GPU (``pack``: by default any tensor not on the CPU) whose layout is dense are packed per
    (device, dtype): gathered into one device buffer by one ``torch._foreach_copy_`` on the tensor's stream (a
    few kernel launches; later kernels on that stream, the next optimiser step, run after it and cannot reach
    the snapshot), then moved by one copy into a pinned host buffer on a side stream, which overlaps the next
    epoch's training. The host side holds every tensor as a view with its source's shape and strides
    (channels-last weights stay so). A copy per tensor, as before, cost the host 25-30 us each: 0.018-0.026 s
    for a ResNet50 trainer's ~800 tensors on an H100 (run J, docs/trainer.md), against a 0.05 target. The
    device buffer is taken from torch's caching allocator for each save and handed back once its copy is
    queued (``record_stream`` keeps it until the copy has run): a state's size on the GPU for a moment.

    A CPU tensor, or one that is not dense, gets its own buffer: the i-th such tensor reuses the i-th buffer when
    shape, strides and dtype match, as each pack is reused while its layouts match (a trainer's state keeps them
    from epoch to epoch). A host that cannot pin (a locked-memory limit) gets pageable buffers and blocking
    copies. :meth:`snapshot` gives the events a reader waits on before reading.

    In the file, the packed tensors of one dtype are views of one storage, as ``torch.save`` keeps views:
    loading gives views of one storage (``load_state_dict`` copies them). Not torch.distributed.checkpoint's
    stagers: they copy whole storages (a view would carry all of its base) and key their cache on storage
    identity, through a private module. A snapshot must not be read after the next :meth:`snapshot`:
    ``CheckpointWriter`` lets a file's next save start only once its last write has landed."""

    def __init__(self, pack: Callable[[torch.Tensor], bool] = on_a_device) -> None:
        self._pack = pack
        self._single: list[tuple[tuple, torch.Tensor, bool]] = []   # (the source's layout, buffer, pinned)
        self._packs: dict[tuple, _Pack] = {}                         # (device, dtype) -> its pack
        self._streams: dict[torch.device, torch.cuda.Stream] = {}  # per GPU: where the packed copies run

    def snapshot(self, state: Any) -> tuple[Any, list]:
        """``state`` copied into these buffers (:func:`cpu_copy`) and one CUDA event per GPU it copied from,
        recorded after every copy from it: the snapshot is whole once they have completed. Buffers it did not
        use (a state that shrank) are let go."""
        tensors: list[torch.Tensor] = []
        cpu_copy(state, lambda tensor: tensors.append(tensor.detach()) or tensor)
        copies: list = [None] * len(tensors)
        groups: dict[tuple, list[int]] = {}
        single, devices = 0, set()
        for i, tensor in enumerate(tensors):
            if tensor.is_cuda:
                devices.add(tensor.device)
            if self._pack(tensor) and dense(tensor):
                groups.setdefault((tensor.device, tensor.dtype), []).append(i)
            else:
                copies[i] = self._copy_single(single, tensor)
                single += 1
        del self._single[single:]
        self._packs = {key: self._packs[key] for key in groups if key in self._packs}
        for key, indices in groups.items():
            for i, view in zip(indices, self._copy_packed(key, [tensors[i] for i in indices])):
                copies[i] = view
        events = []
        for device in devices:   # one event after both streams' copies: the side stream waits for the current
            stream = self._stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))
            event = torch.cuda.Event(blocking=True)   # the write thread sleeps on it, not spins beside the loaders
            event.record(stream)
            events.append(event)
        found = iter(copies)
        return cpu_copy(state, lambda tensor: next(found)), events

    def _copy_single(self, index: int, tensor: torch.Tensor) -> torch.Tensor:
        layout = (tensor.shape, tensor.dtype, tensor.stride(), tensor.is_cuda)
        if index < len(self._single) and self._single[index][0] == layout:
            _, buffer, pinned = self._single[index]
        else:
            # laid out as the tensor: channels-last weights stay a plain memcpy
            buffer, pinned = _pinned(functools.partial(torch.empty_like, tensor, device="cpu"), tensor.is_cuda)
            self._single[index:index + 1] = [(layout, buffer, pinned)]
        buffer.copy_(tensor, non_blocking=pinned)   # on the tensor's stream: later kernels there run after it
        return buffer

    def _copy_packed(self, key: tuple, sources: list[torch.Tensor]) -> list[torch.Tensor]:
        device, dtype = key
        layouts = [(tuple(t.shape), t.stride()) for t in sources]
        pack = self._packs.get(key)
        if pack is None or pack.layouts != layouts:
            pack = self._packs[key] = _Pack.for_layouts(layouts, dtype, pin=device.type == "cuda")
        staging = torch.empty(pack.host.numel(), dtype=dtype, device=device)
        torch._foreach_copy_(pack.views_of(staging), sources)   # one dtype's tensors gathered by a few launches
        if device.type != "cuda":   # the CPU stand-in the tests run: the same views, one plain copy
            pack.host.copy_(staging)
            return pack.views
        stream = self._stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            pack.host.copy_(staging, non_blocking=pack.pinned)
        staging.record_stream(stream)   # the allocator keeps it until the side stream's copy has run
        return pack.views

    def _stream(self, device: torch.device) -> "torch.cuda.Stream":
        if device not in self._streams:
            self._streams[device] = torch.cuda.Stream(device)
        return self._streams[device]

    @property
    def nbytes(self) -> int:
        """Host memory held, in bytes."""
        buffers = [b for _, b, _ in self._single] + [p.host for p in self._packs.values()]
        return sum(buffer.numel() * buffer.element_size() for buffer in buffers)


def _pinned(empty: Callable[..., torch.Tensor], pin: bool) -> tuple[torch.Tensor, bool]:
    """``empty()``, pinned when asked and possible: a host that cannot pin (a locked-memory limit) still gets its
    checkpoint, copied blocking."""
    if pin:
        try:
            return empty(pin_memory=True), True
        except RuntimeError:
            pass
    return empty(), False
