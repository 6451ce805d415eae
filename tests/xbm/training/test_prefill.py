"""``memory.prefill``: which rows, from which model, when (xbm/training/prefill.py and its call in the trainer)."""
from __future__ import annotations

import copy

import pytest
import torch

import xbm.trainer.run as trainer_module
from xbm.memory import IndexedMemory
from xbm.memory import EmbeddingMemory
from xbm.training.prefill import prefill, prefill_samples

from ..conftest import TINY_TRAIN_SAMPLES, tiny_trainer


def test_a_memory_of_the_training_set_takes_every_sample_and_a_smaller_one_a_seeded_draw():
    """Bug caught: a smaller memory filled with the first indices (the first classes of a data set stored class
    by class), a draw that repeats a sample, or one that changes with anything but the seed."""
    everything = prefill_samples(10, 10, seed=3)
    assert sorted(everything.tolist()) == list(range(10))
    some = prefill_samples(10, 4, seed=3)
    assert len(set(some.tolist())) == 4 and some.tolist() == prefill_samples(10, 4, seed=3).tolist()
    assert some.tolist() != [0, 1, 2, 3] and some.tolist() != prefill_samples(10, 4, seed=4).tolist()
    assert some.tolist() == torch.randperm(10, generator=torch.Generator().manual_seed(3))[:4].tolist()


def test_a_ring_is_full_of_the_drawn_samples_in_draw_order():
    """Bug caught: rows and labels of different samples paired up, or a prefilled ring left half full or with its
    pointer elsewhere than the oldest row."""
    embeddings, labels = torch.arange(16.0).view(8, 2), torch.arange(8) * 10
    memory = EmbeddingMemory(5, 2)
    samples = prefill(memory, embeddings, labels, seed=1, iteration=4)
    assert len(memory) == 5 and int(memory.pointer) == 0
    valid = memory.valid()
    assert valid.indices.tolist() == samples.tolist() == prefill_samples(8, 5, seed=1).tolist()
    assert torch.equal(valid.embeddings, embeddings[samples]) and valid.labels.tolist() == (samples * 10).tolist()
    assert valid.iterations.tolist() == [4] * 5


def test_an_indexed_memory_holds_each_sample_at_its_own_row():
    embeddings, labels = torch.arange(12.0).view(6, 2), torch.tensor([3, 1, 4, 1, 5, 9])
    memory = IndexedMemory(6, 2)
    prefill(memory, embeddings, labels, seed=0)
    assert len(memory) == 6 and torch.equal(memory.embeddings, embeddings) and torch.equal(memory.labels, labels)
    with pytest.raises(ValueError, match="prefill needs an empty memory, but it holds 6 rows"):
        prefill(memory, embeddings, labels, seed=0)


def _record_epochs(monkeypatch, trainer):
    """Before each epoch's steps: (epoch index, memory rows, a copy of the model), as the first step finds them."""
    seen = []
    real = trainer_module.run_epoch

    def run_epoch(step, batches, runtime, epoch, epoch_index):
        memory = trainer.xbm.memory
        seen.append((epoch_index, copy.deepcopy(memory.valid()), copy.deepcopy(trainer.model)))
        return real(step, batches, runtime, epoch=epoch, epoch_index=epoch_index)

    monkeypatch.setattr(trainer_module, "run_epoch", run_epoch)
    return seen


def _by_hand(model, trainer, indices):
    """Eval-mode embeddings of the training samples ``indices`` through the evaluation view, one by one."""
    model.eval()
    with torch.no_grad():
        return torch.stack([model(trainer.embed.prepare(torch.as_tensor(trainer.train_view[int(i)][0])[None]))[0]
                            for i in indices])


@pytest.mark.parametrize("values", [{"memory.ratio": 0.5},
                                    {"memory.update": "indexed", "memory.ratio": 1.0, "objective": "instance"}],
                         ids=["ring", "indexed_instance"])
def test_the_first_memory_step_finds_the_memory_full_of_the_current_models_embeddings(values, monkeypatch):
    """At ``memory.start_epoch`` = 1, after a main epoch without the memory (and a warm-up). Values against a
    copy of the model taken just before the first memory step. Bug caught: a memory not full at its first step
    (no prefill, or a prefill after it), filled too early (before start_epoch, by a model later epochs change),
    by another model (the untrained or warm-up one), with the wrong labels (a label-free
    objective's rows are labelled by image id), or with rows of other samples than their indices say."""
    trainer = tiny_trainer(**{"memory.prefill": True, "memory.start_epoch": 1, "epochs": 2, "warmup_epochs": 1,
                              **values})
    seen = _record_epochs(monkeypatch, trainer)
    list(trainer.fit())
    *_, (before, empty, _), (start, rows, model) = seen   # after the warm-up's pass
    assert (before, start, len(empty.embeddings)) == (0, 1, 0)
    indexed, size = "memory.update" in values, trainer.xbm.memory.size
    assert len(rows.embeddings) == size == (TINY_TRAIN_SAMPLES if indexed else TINY_TRAIN_SAMPLES // 2)
    drawn = prefill_samples(TINY_TRAIN_SAMPLES, size, trainer.cfg.seed).tolist()
    assert rows.indices.tolist() == (sorted(drawn) if indexed else drawn)   # indexed: row order
    want = trainer.splits.train.labels[rows.indices] if trainer.objective.uses_labels else rows.indices
    assert torch.equal(rows.labels, want)
    torch.testing.assert_close(rows.embeddings, _by_hand(model, trainer, rows.indices))
    assert set(rows.iterations.tolist()) == {0}   # written before the memory's first step (iteration 0)


def test_without_prefill_the_memory_starts_empty():
    """Bug caught: prefill on by default, or run when ``memory.prefill`` is false."""
    trainer = tiny_trainer(epochs=1)
    trainer.prepare()
    seen = []
    trainer.xbm.register_forward_pre_hook(lambda module, args: seen.append(len(module.memory)))
    trainer.train_epoch(1)
    assert seen[0] == 0



@pytest.mark.slow
def test_two_workers_prefill_the_same_memory_as_one_worker():
    """Bug caught: each rank prefilling from its own forward pass or its own draw (memories that differ between
    ranks, which the data-parallel run requires bit-identical), or a rank left with an empty memory."""
    from ..distributed_fixture import ALL_PAIRS, build, record, run_all, spawn

    values = {"memory.prefill": True, "memory.start_epoch": 1, "epochs": 2, "normaliser.kind": "xbn", **ALL_PAIRS}
    (two, ), (other, ) = spawn(run_all, 2, [values])
    one = record(build(values))
    first_memory_step = 6   # 6 global batches an epoch: the 7th step is the memory's first
    assert len(one["steps"]) == len(two["steps"]) == 12 - first_memory_step
    for a, b in zip(two["steps"], other["steps"]):
        assert torch.equal(a, b)
    z1, y1, i1 = one["memory"][-1]
    z2, y2, i2 = two["memory"][-1]
    assert torch.equal(y1, y2) and torch.equal(i1, i2) and len(i1) == TINY_TRAIN_SAMPLES // 2
    torch.testing.assert_close(z2, z1, rtol=0, atol=1e-6)
