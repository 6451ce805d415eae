"""EmbeddingMemory: modulo writes against a naive ring, valid rows only, dtype, state_dict."""
from __future__ import annotations

import re

import pytest
import torch

from xbm.memory import EmbeddingMemory

from tests.xbm.conftest import needs_cuda

BATCH = 8


class NaiveRing:
    """Writes rows one by one into Python lists: the obviously right ring buffer."""

    def __init__(self, size):
        self.size, self.pointer, self.rows = size, 0, [None] * size

    def write(self, rows):
        for row in rows:
            self.rows[self.pointer] = row
            self.pointer = (self.pointer + 1) % self.size

    def filled(self):
        return [r for r in self.rows if r is not None]


DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("size", [BATCH - 1, BATCH, BATCH + 1, 2 * BATCH + 3, 3])
def test_wrap_around_matches_a_naive_ring(size, device):
    """On CUDA too: there ``index_copy_`` with repeated slots keeps no promised row, so a batch larger than
    the memory must be cut to its newest rows before the write (bug caught: the cut dropped, older rows
    of the batch left in slots that the newest should hold)."""
    memory, ring = EmbeddingMemory(size, 4, device=device), NaiveRing(size)
    gen = torch.Generator().manual_seed(size)
    for step in range(7):
        emb = torch.randn(BATCH, 4, generator=gen).to(device)
        labels = torch.randint(0, 5, (BATCH,), generator=gen)
        indices = torch.arange(BATCH) + 100 * step
        slots = memory.enqueue(emb, labels, indices, iteration=step)
        ring.write([(emb[j].cpu(), int(labels[j]), int(indices[j]), step, j) for j in range(BATCH)])
        rows = ring.filled()
        valid = memory.valid()
        assert valid.embeddings.device.type == slots.device.type == device
        valid, slots = type(valid)(*(t.cpu() for t in valid)), slots.cpu()
        assert len(memory) == len(rows) == min(size, BATCH * (step + 1))
        assert int(memory.pointer) == ring.pointer
        torch.testing.assert_close(valid.embeddings, torch.stack([r[0] for r in rows]), rtol=0, atol=0)
        assert valid.labels.tolist() == [r[1] for r in rows]
        assert valid.indices.tolist() == [r[2] for r in rows]
        assert valid.iterations.tolist() == [r[3] for r in rows]
        # Each surviving batch row's slot holds it; rows overwritten within the batch have slot -1.
        survivors = {r[4]: slot for slot, r in enumerate(ring.rows) if r is not None and r[3] == step}
        assert slots.tolist() == [survivors.get(j, -1) for j in range(BATCH)]


def test_half_filled_memory_exposes_only_filled_rows():
    memory = EmbeddingMemory(10, 3)
    assert len(memory) == 0 and memory.valid().embeddings.shape == (0, 3)
    memory.enqueue(torch.ones(4, 3), torch.full((4,), 7))
    valid = memory.valid()
    assert valid.embeddings.shape == (4, 3) and valid.labels.tolist() == [7] * 4
    assert valid.indices.tolist() == [-1] * 4 and valid.iterations.tolist() == [-1] * 4
    assert int(memory.filled) == 4 and int(memory.pointer) == 4


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_rows_are_stored_detached_in_fp32(dtype):
    memory = EmbeddingMemory(5, 2)
    emb = torch.randn(3, 2, dtype=dtype, requires_grad=True)
    memory.enqueue(emb * 2, torch.arange(3))
    stored = memory.valid().embeddings
    assert stored.dtype == torch.float32 and not stored.requires_grad
    torch.testing.assert_close(stored, (emb * 2).detach().float())


def test_replace_valid_writes_only_the_filled_rows():
    memory = EmbeddingMemory(6, 2)
    memory.enqueue(torch.ones(4, 2), torch.arange(4))
    memory.replace_valid(torch.full((4, 2), 3.0, dtype=torch.float16))
    assert memory.embeddings[:4].eq(3).all() and memory.embeddings[4:].eq(0).all()
    with pytest.raises(ValueError, match=r"\[4, 2\].*\(6, 2\)"):
        memory.replace_valid(torch.zeros(6, 2))


def test_state_dict_round_trip_keeps_pointer_and_fill():
    first = EmbeddingMemory(11, 3)
    for step in range(3):
        first.enqueue(torch.randn(4, 3), torch.arange(4) + step, torch.arange(4), iteration=step)
    state = first.state_dict()
    assert int(state["pointer"]) == 1 and int(state["filled"]) == 11
    second = EmbeddingMemory(11, 3)
    second.load_state_dict(state)
    batch = torch.randn(4, 3)
    for mem in (first, second):
        mem.enqueue(batch, torch.zeros(4, dtype=torch.long), iteration=9)
    for name, value in first.state_dict().items():
        torch.testing.assert_close(second.state_dict()[name], value, rtol=0, atol=0)


def test_reset_empties_the_memory():
    memory = EmbeddingMemory(4, 2)
    memory.enqueue(torch.ones(3, 2), torch.ones(3, dtype=torch.long), torch.arange(3), iteration=1)
    memory.reset()
    assert len(memory) == 0 and int(memory.pointer) == 0 and memory.embeddings.eq(0).all()


@pytest.mark.parametrize("size,dim", [(0, 3), (3, 0), (2.5, 3), (True, 3)])
def test_bad_sizes_raise(size, dim):
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        EmbeddingMemory(size, dim)


def test_bad_batches_raise():
    memory = EmbeddingMemory(4, 2)
    with pytest.raises(ValueError, match=r"\[B, 2\]"):
        memory.enqueue(torch.zeros(3, 5), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="indices must have shape"):
        memory.enqueue(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long), torch.zeros(2, dtype=torch.long))


def test_labels_and_indices_of_any_integer_dtype_are_stored_as_int64():
    """Bug caught (mutation testing): labels or indices copied without the cast to the int64 buffers
    (index_copy_ refuses int32 sources, so int32 labels from a data loader would crash the step)."""
    memory = EmbeddingMemory(4, 2)
    memory.enqueue(torch.ones(3, 2), torch.tensor([5, 6, 7], dtype=torch.int32),
                   indices=torch.tensor([10, 11, 12], dtype=torch.int32))
    _, labels, indices, _ = memory.valid()
    assert labels.dtype == indices.dtype == torch.long
    assert labels.tolist() == [5, 6, 7] and indices.tolist() == [10, 11, 12]


def test_reset_empties_the_memory_and_marks_every_slot_unwritten():
    """Bug caught (mutation testing): a new or reset memory whose sample indices / iterations look real
    (>= 0, or another sentinel than -1), or a reset leaving the pointer where it was."""
    memory = EmbeddingMemory(4, 2)
    assert memory.indices.tolist() == [-1] * 4 and memory.iterations.tolist() == [-1] * 4
    memory.enqueue(torch.ones(3, 2), torch.tensor([1, 2, 3]), indices=torch.tensor([0, 1, 2]), iteration=7)
    memory.reset()
    assert len(memory) == 0 and int(memory.pointer) == 0 and int(memory.filled) == 0
    assert memory.indices.tolist() == [-1] * 4 and memory.iterations.tolist() == [-1] * 4
    assert memory.embeddings.abs().sum() == 0 and memory.labels.abs().sum() == 0
    slots = memory.enqueue(torch.ones(2, 2), torch.tensor([4, 5]))
    assert slots.tolist() == [0, 1]


@pytest.mark.parametrize("size, dim, message", [(0, 2, "memory size must be an integer >= 1, but got 0"),
                                                (3, 0, "memory dim must be an integer >= 1, but got 0"),
                                                (2.0, 2, "memory size must be an integer >= 1, but got 2.0"),
                                                (True, 2, "memory size must be an integer >= 1, but got True")])
def test_bad_sizes_name_the_argument_and_value(size, dim, message):
    """Bug caught (mutation testing): the message naming the wrong argument, or the bound moved."""
    with pytest.raises(ValueError, match=re.escape(message)):
        EmbeddingMemory(size, dim)


def test_a_memory_of_one_row_keeps_the_newest_row():
    """Bug caught (mutation testing): size 1 refused (a bound of > 1 instead of >= 1)."""
    memory = EmbeddingMemory(1, 1)
    memory.enqueue(torch.tensor([[1.0], [2.0]]), torch.tensor([0, 1]))
    assert memory.valid()[0].tolist() == [[2.0]] and len(memory) == 1


# The "meta" device stands in for a GPU on a CPU-only machine: a second device whose kernels refuse
# operands from another device, as CUDA's do, so device mix-ups fail here as they would on a GPU.
BUFFERS = ("embeddings", "labels", "indices", "iterations", "pointer", "filled")


def test_a_memory_built_for_a_device_holds_every_buffer_there():
    """Bug caught (mutation testing): a buffer built without ``device=`` (on the CPU) in a memory asked
    for the GPU, so its first enqueue mixes devices (or a checkpoint restores it to the wrong device)."""
    memory = EmbeddingMemory(4, 2, device="meta")
    assert {name: getattr(memory, name).device.type for name in BUFFERS} == dict.fromkeys(BUFFERS, "meta")


def test_the_buffers_follow_the_embeddings_even_with_labels_left_on_the_loader_device():
    """Bug caught (mutation testing): the memory not moved to the embeddings' device (the ``!=`` test
    inverted, ``.to(None)``), slots built on the default device, or labels / sample indices that the
    data loader left on the CPU copied without ``.to(device)``: each is a device-mismatch crash on the
    first GPU step."""
    memory = EmbeddingMemory(4, 2)
    slots = memory.enqueue(torch.zeros(3, 2, device="meta"), torch.tensor([1, 2, 3]),
                           indices=torch.tensor([0, 1, 2]), iteration=5)
    assert slots.device.type == "meta" and len(memory) == 3
    assert {name: getattr(memory, name).device.type for name in BUFFERS} == dict.fromkeys(BUFFERS, "meta")


def test_checkpointed_counters_and_labels_are_int64():
    """Bug caught (mutation testing): ``pointer`` / ``filled`` built without ``dtype=torch.long`` (fp32
    counters in checkpoints, inexact beyond 2**24 and silently rounded when loaded), or labels / indices /
    iterations buffers of another integer type than the int64 the loss and the miners index with."""
    state = EmbeddingMemory(4, 2).state_dict()
    assert {name: state[name].dtype for name in BUFFERS} == {"embeddings": torch.float32, **dict.fromkeys(
        BUFFERS[1:], torch.long)}


def test_a_tensor_iteration_is_written_into_every_kept_row():
    """Bug caught: a 0-dim tensor iteration (XBMLoss's counter, kept on the device so that it is never read
    back) written to one row only, or not at all, or as another value (the copy that replaced index_fill_)."""
    memory = EmbeddingMemory(5, 3)
    memory.enqueue(torch.randn(3, 3), torch.arange(3), iteration=torch.tensor(7))
    memory.enqueue(torch.randn(4, 3), torch.arange(4), iteration=torch.tensor(8))
    assert memory.iterations.tolist() == [8, 8, 7, 8, 8] and memory.valid().iterations.dtype == torch.long


def test_nbytes_counts_every_buffer_whatever_the_fill():
    """Bug caught: memory_bytes counting the embeddings alone or only the filled rows (the memory is
    preallocated, so its cost does not grow with the fill)."""
    memory = EmbeddingMemory(10, 4)
    empty = memory.nbytes
    assert empty == 10 * 4 * 4 + 3 * 10 * 8 + 2 * 8  # embeddings fp32; labels, indices, iterations; pointer, filled
    memory.enqueue(torch.randn(3, 4), torch.arange(3))
    assert memory.nbytes == empty
