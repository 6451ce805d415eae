"""``xbm.training.host_buffers``: a checkpoint's host snapshot holds every tensor's values and layout as they were
at the snapshot, the GPU's packed copies included (run here through the CPU stand-in: the same views, offsets and
foreach copy), in one copy per dtype, with memory kept from one save to the next and let go when unused."""
import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from xbm.training.host_buffers import HostBuffers, dense
from xbm.training.checkpoint import load_checkpoint

from ..conftest import needs_cuda

PACK_ALL = dict(pack=lambda tensor: True)   # the GPU's packing, run on CPU tensors


def mixed_state(device="cpu") -> dict:
    """A trainer-like state on ``device``: weights (one channels-last), optimiser moments, bf16, int64 counters, a
    0-dim step, a bool mask, a slice with gaps and a broadcast between them, nested as a state_dict nests."""
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(device)

    return {"epoch": 2,
            "model": collections.OrderedDict(conv=randn(8, 3, 3, 3).to(memory_format=torch.channels_last),
                                             fc=randn(5, 7), tracked=torch.tensor(3, device=device)),
            "optimizer": {"state": {0: {"step": torch.tensor(4.0, device=device), "exp_avg": randn(33)}}},
            "half": randn(3, 5).bfloat16(), "labels": torch.arange(9, device=device),
            "mask": torch.tensor([True, False, True], device=device), "gapped": randn(4, 10)[:, ::2],
            "after": randn(6), "broadcast": randn(3, 1).expand(3, 4), "rng": (torch.tensor([7, 8]), [1, 2])}


def tensors_of(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_of(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_of(v)]
    return []


def assert_same(snapshot, state):
    held, live = tensors_of(snapshot), tensors_of(state)
    assert len(held) == len(live)
    for h, t in zip(held, live):
        assert h.device.type == "cpu" and h.dtype == t.dtype and h.shape == t.shape
        assert torch.equal(h, t.cpu())
        if dense(t):
            assert h.stride() == t.stride()   # channels-last stays channels-last


def advance(state):
    """The next epoch's in-place updates to every tensor the state holds."""
    for t in tensors_of(state):
        t = t if 0 not in t.stride() else t._base   # a broadcast changes through the tensor it expands
        t.logical_not_() if t.dtype == torch.bool else t.add_(1)


@pytest.mark.parametrize("options", [{}, PACK_ALL], ids=["a-copy-per-tensor", "packed-per-dtype"])
def test_a_snapshot_holds_every_value_and_layout_and_no_later_update(options):
    """Bugs caught: packed views that overlap (a later tensor of the dtype overwriting an earlier one: offsets not
    advanced by the size, or a slice with gaps given its span's room), a channels-last weight saved with
    another layout's strides, two dtypes in one pack, a snapshot that the next step's in-place update reaches,
    a plain leaf shared with the live state."""
    state = mixed_state()
    snapshot, events = HostBuffers(**options).snapshot(state)
    expected = [t.clone() for t in tensors_of(state)]
    assert events == []
    assert_same(snapshot, state)
    advance(state)
    state["rng"][1].append(3)
    assert all(torch.equal(h, e) for h, e in zip(tensors_of(snapshot), expected))
    assert snapshot["rng"][1] == [1, 2] and snapshot["epoch"] == 2
    assert isinstance(snapshot["model"], collections.OrderedDict)


class CopyCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def test_packed_tensors_are_copied_once_per_dtype():
    """Bug caught: packing that falls back to a copy per tensor (a channels-last weight judged not dense, the
    ``pack`` choice ignored): on an H100 ~800 copies cost the host 0.018-0.026 s an epoch (run J). Two dtypes,
    many tensors: one gathering copy and one host copy each. The default leaves CPU tensors unpacked (packing
    them would copy each tensor twice)."""
    state = {"w": [torch.randn(3, 4).to(memory_format=torch.contiguous_format) for _ in range(20)],
             "conv": torch.randn(2, 3, 2, 2).to(memory_format=torch.channels_last), "n": [torch.tensor(i) for i in range(5)]}
    with CopyCounter() as packed:
        HostBuffers(**PACK_ALL).snapshot(state)
    assert packed.calls["_foreach_copy_"] == 2 and packed.calls["copy_"] == 2
    with CopyCounter() as default:
        HostBuffers().snapshot(state)
    assert default.calls["_foreach_copy_"] == 0 and default.calls["copy_"] == 26


@pytest.mark.parametrize("make, expected", [
    (lambda: torch.zeros(2, 3), True), (lambda: torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last), True),
    (lambda: torch.zeros(3, 4).t(), True), (lambda: torch.tensor(1.0), True),
    (lambda: torch.zeros(2, 1, 3).as_strided((2, 1, 3), (3, 99, 1)), True),     # a size-1 dim's stride is free
    (lambda: torch.zeros(4, 6)[:, ::2], False), (lambda: torch.zeros(4, 6)[:, :3], False),
    (lambda: torch.zeros(3, 1).expand(3, 4), False), (lambda: torch.zeros(10).as_strided((3, 3), (1, 1)), False),
])
def test_dense_tells_which_tensors_a_view_with_their_strides_holds_exactly(make, expected):
    """Bug caught: a slice with gaps, a broadcast or an overlapping view packed as if dense (its span is not its
    element count, so it would overrun the next tensor's slot); a transposed or channels-last tensor refused."""
    assert dense(make()) is expected


def test_a_pack_is_reused_while_its_layouts_hold_and_rebuilt_when_one_changes():
    """Bugs caught: a pinned host pack allocated afresh at every save (on a GPU, pinning 300 MB: 0.19 s, run H),
    or one reused after a tensor changed shape (a memory that grew read through the old, shorter view)."""
    buffers, weights = HostBuffers(**PACK_ALL), torch.arange(6.0)
    first, _ = buffers.snapshot({"w": weights, "memory": torch.zeros(2)})
    address = first["w"].data_ptr()
    weights.add_(10)
    second, _ = buffers.snapshot({"w": weights, "memory": torch.zeros(2)})
    assert second["w"].data_ptr() == address and second["w"].tolist() == list(range(10, 16))
    third, _ = buffers.snapshot({"w": weights, "memory": torch.ones(5)})
    assert third["memory"].tolist() == [1.0] * 5 and third["w"].tolist() == list(range(10, 16))


@pytest.mark.parametrize("options", [{}, PACK_ALL], ids=["a-copy-per-tensor", "packed-per-dtype"])
def test_a_state_that_shrinks_lets_its_unused_buffers_go(options):
    """Bug caught: host buffers kept for tensors or a dtype a later state no longer has (a smaller memory, a
    dropped optimiser), held for the run's length: pinned memory on a GPU."""
    buffers = HostBuffers(**options)
    for state in ({"a": torch.zeros(3), "b": torch.zeros(1000), "n": torch.arange(5)}, {"a": torch.ones(3)}):
        snapshot, _ = buffers.snapshot(state)
    assert torch.equal(snapshot["a"], torch.ones(3))
    assert buffers.nbytes == (3 * 4 if not options else 16 * 4)   # a pack pads each tensor to 64 bytes


def test_a_packed_snapshot_round_trips_through_a_file(tmp_path):
    """Bug caught: packed views that torch.save cannot write or a weights-only load refuses (the checkpoint a
    GPU run writes unreadable by ``--resume``), or whose values come back misplaced."""
    state = mixed_state()
    snapshot, _ = HostBuffers(**PACK_ALL).snapshot(state)
    torch.save(snapshot, tmp_path / "checkpoint.pt")
    assert_same(load_checkpoint(tmp_path / "checkpoint.pt"), state)


@needs_cuda
def test_a_gpu_snapshot_holds_its_values_while_the_next_steps_reuse_the_memory():
    """Bugs caught (CUDA only): the device buffer the packed copies gather into handed back to the allocator
    before the side stream's copy has run (no ``record_stream``), so the next epoch's first allocation of that
    size, filled on the training stream, lands in the snapshot; a snapshot read before its events. The side
    stream is held back so that its copy runs after the training stream's next kernels."""
    state = mixed_state("cuda")
    expected = [t.to("cpu", copy=True) for t in tensors_of(state)]   # copies: advance() changes the CPU ones too
    buffers = HostBuffers()
    side = buffers._stream(state["after"].device)   # cuda:0, the key snapshot uses (torch.device("cuda") is not)
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)   # the copy engine's queue still busy with an earlier transfer
    snapshot, events = buffers.snapshot(state)
    size = sum(p.host.numel() for key, p in buffers._packs.items() if key[1] == torch.float32)
    torch.full((size,), -1.0, device="cuda")   # the next epoch's first allocation of that size, written at once
    advance(state)
    for event in events:
        event.synchronize()
    assert len(events) == 1 and buffers._packs
    assert all(torch.equal(h, e) for h, e in zip(tensors_of(snapshot), expected))
    assert all(p.pinned and p.host.is_pinned() for p in buffers._packs.values())
