"""IndexedMemory (``memory.update=indexed``): rows at the samples' indices, the fill mask, positions, state_dict."""
from __future__ import annotations

import pytest
import torch

from xbm.memory import IndexedMemory

from tests.xbm.conftest import needs_cuda, tiny_trainer

DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]


def rows(*values):
    return torch.tensor([[float(v), -float(v)] for v in values])


@pytest.mark.parametrize("device", DEVICES)
def test_each_batch_row_is_written_at_its_sample_index(device):
    """Bug caught: an indexed update that writes a sample's row elsewhere (at the batch position or a ring
    pointer, as a ring does) or exposes unwritten zero rows (label 0 is a real class) as references."""
    memory = IndexedMemory(6, 2, device=device)
    positions = memory.enqueue(rows(10, 20, 30).to(device), torch.tensor([1, 2, 3]), torch.tensor([4, 0, 2]),
                               iteration=7)
    assert memory.embeddings.cpu().tolist() == [[20, -20], [0, 0], [30, -30], [0, 0], [10, -10], [0, 0]]
    assert memory.labels.tolist() == [2, 0, 3, 0, 1, 0]
    assert memory.indices.tolist() == [0, -1, 2, -1, 4, -1] and memory.iterations.tolist() == [7, -1, 7, -1, 7, -1]
    assert memory.written.tolist() == [True, False, True, False, True, False] and len(memory) == 3
    valid = memory.valid()   # the written rows in row order: 0, 2, 4
    assert valid.embeddings.cpu().tolist() == [[20, -20], [30, -30], [10, -10]]
    assert valid.labels.tolist() == [2, 3, 1] and valid.indices.tolist() == [0, 2, 4]
    # each batch row's position among the valid rows: sample 4 is valid row 2, sample 0 row 0, sample 2 row 1
    assert positions.tolist() == [2, 0, 1]


def test_a_sample_seen_again_is_overwritten_in_place():
    """Bug caught: a second copy of a sample appended (the ring's behaviour) instead of its row replaced."""
    memory = IndexedMemory(4, 2)
    memory.enqueue(rows(1, 2), torch.tensor([5, 6]), torch.tensor([1, 3]), iteration=0)
    positions = memory.enqueue(rows(9, 4), torch.tensor([7, 8]), torch.tensor([3, 0]), iteration=1)
    assert len(memory) == 3 and memory.valid().embeddings.tolist() == [[4, -4], [1, -1], [9, -9]]
    assert memory.valid().labels.tolist() == [8, 5, 7] and memory.valid().iterations.tolist() == [1, 0, 1]
    assert positions.tolist() == [2, 0]


def test_a_batch_with_one_index_twice_stores_its_later_row():
    """Two views of one image in a batch (objective=instance). Bug caught: the row kept left to the order in
    which index_copy_ applies duplicates (CUDA promises none), or the overwritten row given the kept row's
    position, so that its pair with its sibling view (a true positive) would be dropped as a self pair."""
    memory = IndexedMemory(3, 2)
    positions = memory.enqueue(rows(1, 2, 3), torch.tensor([0, 1, 0]), torch.tensor([2, 0, 2]))
    assert memory.valid().embeddings.tolist() == [[2, -2], [3, -3]]
    assert positions.tolist() == [-1, 0, 1]


def test_a_full_memory_returns_views_and_its_rows_as_positions():
    """Once every row is written (prefill, or a pass over the data) positions are rows and ``valid()`` is the
    buffers themselves. Bug caught: a full memory still gathering a copy, which a normaliser would then adapt
    without the memory seeing it."""
    memory = IndexedMemory(3, 2)
    memory.enqueue(rows(1, 2, 3), torch.tensor([0, 1, 2]), torch.tensor([2, 0, 1]))
    positions = memory.enqueue(rows(5), torch.tensor([4]), torch.tensor([1]))
    assert positions.tolist() == [1] and len(memory) == 3
    assert memory.valid().embeddings.data_ptr() == memory.embeddings.data_ptr()


def test_adapted_rows_of_a_partly_written_memory_go_back_to_their_rows():
    """Bug caught: adapted rows written to the first slots (the ring's ``replace_valid``) instead of the
    written rows, or lost because ``valid()`` gave a copy."""
    memory = IndexedMemory(4, 2)
    memory.enqueue(rows(1, 2), torch.tensor([0, 0]), torch.tensor([3, 1]))
    stored = memory.valid().embeddings
    stored += 100.0   # as a normaliser adapts it in place (out=stored)
    memory.store_adapted(stored)
    assert memory.embeddings.tolist() == [[0, 0], [102, 98], [0, 0], [101, 99]]
    with pytest.raises(ValueError, match=r"\[2, 2\] \(the written rows\)"):
        memory.replace_valid(torch.zeros(4, 2))


def test_the_fill_mask_and_counters_round_trip_through_state_dict():
    """Bug caught: the written mask or the host copy of the fill not restored, so a resumed run uses unwritten
    zero rows as references or reads a stale length."""
    memory = IndexedMemory(5, 2)
    memory.enqueue(rows(1, 2), torch.tensor([3, 4]), torch.tensor([4, 1]), iteration=3)
    loaded = IndexedMemory(5, 2)
    loaded.load_state_dict(memory.state_dict())
    assert len(loaded) == 2 and loaded.written.tolist() == [False, True, False, False, True]
    for a, b in zip(loaded.valid(), memory.valid()):
        assert torch.equal(a, b)
    same = [m.enqueue(rows(7), torch.tensor([9]), torch.tensor([0])) for m in (memory, loaded)]
    assert same[0].tolist() == same[1].tolist() == [0] and len(loaded) == 3


def test_missing_indices_and_reset():
    """Bug caught: an indexed memory that silently appends rows without indices, or a reset leaving rows marked
    written."""
    memory = IndexedMemory(3, 2)
    with pytest.raises(ValueError, match="the samples' indices"):
        memory.enqueue(rows(1), torch.tensor([0]))
    memory.enqueue(rows(1), torch.tensor([0]), torch.tensor([2]))
    memory.reset()
    assert len(memory) == 0 and not memory.written.any() and len(memory.valid().embeddings) == 0


def test_a_trainer_checkpoint_restores_an_indexed_memory_and_the_run_continues_alike(tmp_path):
    """Bug caught: the indexed memory's fill mask missing from Trainer.state_dict, or a resumed run whose
    memory (rows, mask, fill) differs from the saved one, so that it no longer repeats the uninterrupted run."""
    values = {"memory.update": "indexed", "memory.ratio": 1.0, "epochs": 2, "normaliser.kind": "xbn"}
    full = list(tiny_trainer(**values).fit())
    run = tiny_trainer(**values)
    next(run.fit())
    assert 0 < len(run.xbm.memory) < run.xbm.memory.size   # one pass of the class sampler leaves rows unwritten
    path = tmp_path / "state.pt"
    torch.save(run.state_dict(), path)
    resumed = tiny_trainer(**values)
    resumed.load_state_dict(torch.load(path, weights_only=True))
    saved, loaded = run.xbm.memory, resumed.xbm.memory
    assert type(loaded).__name__ == "IndexedMemory" and len(loaded) == len(saved)
    assert torch.equal(loaded.written, saved.written) and torch.equal(loaded.embeddings, saved.embeddings)
    assert [row["loss"] for row in resumed.fit()] == [full[1]["loss"]]
