"""Host synchronisations of a training step: at most one per step (issue 18, "a step without host waits").

On the CPU nothing waits, so the reads are counted instead: every way Python reads a tensor's value
(``item``, ``float``, ``int``, ``bool``, ``tolist``, ``numpy``, ``__index__``) is patched to count its calls
while ``run_epoch`` runs a step (the loader's ``next`` excluded: collation is not the step). On a GPU each
of those would make the CPU wait for the device; ``set_sync_debug_mode`` checks the CUDA side."""
from __future__ import annotations

import pytest
import torch

from xbm.normalisers.config import KINDS
from xbm.training import epoch as epoch_module
from xbm.training.epoch import Step, run_epoch

from ..conftest import needs_cuda, tiny_trainer

READS = ("item", "__float__", "__int__", "__bool__", "tolist", "numpy", "__index__")


class Counter:
    """Reads per step: ``steps[i]`` lists the reads of step i (by method name)."""

    def __init__(self) -> None:
        self.steps: list[list[str]] = []
        self.on = False

    def wrap(self, name, original):
        def counted(tensor, *args, **kwargs):
            if self.on:
                self.steps[-1].append(name)
            return original(tensor, *args, **kwargs)
        return counted


def _counted_loader(loader, counter):
    """The loader with counting paused inside ``next`` (building a batch is not the step)."""
    for batch in loader:
        counter.steps.append([])
        counter.on = True
        yield batch
        counter.on = False


def _main_step(trainer):
    """A main-phase step as on CUDA: the fused AdamW that ``main_optimizer`` builds there (it exists on the CPU
    too), so the finiteness flag is read one step late and the optimiser reads no step counter."""
    trainer.model.train()
    optimizer = torch.optim.AdamW(trainer.model.parameters(), lr=1e-3, fused=True)
    return Step(trainer.model, trainer.objective, trainer.criterion(0), optimizer, trainer.scaler,
                list(trainer.model.parameters()), trainer.cfg.clip_grad, trainer.prepare_train)


@pytest.mark.parametrize("kind", KINDS)
def test_a_step_reads_the_device_at_most_once_for_every_normaliser_kind(kind, monkeypatch):
    """Bugs caught (issue 18): ``loss.item()`` plus pair counts read with ``float()`` every step; the
    normalisers reading their scalar state (AXBN's gain, the call count) or checking label ranges with
    ``int()`` every step; PC-XBN/SC-XBN reading group sizes back; SupCon's ``.any()`` checks and PML's
    assertion; a second mining for the statistics; the optimiser reading its step count. The epoch's sums
    are read once, at its end, outside the steps."""
    trainer = tiny_trainer(**{"normaliser.kind": kind, "memory.ratio": 0.5})
    # A first epoch fills the memory so that every kind adapts in the counted one.
    run_epoch(_main_step(trainer), trainer.loader, trainer.runtime, epoch=1, epoch_index=0)
    counter = Counter()
    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, counter.wrap(name, getattr(torch.Tensor, name)))
    step = _main_step(trainer)
    result = run_epoch(step, _counted_loader(trainer.loader, counter), trainer.runtime, epoch=2, epoch_index=1)
    assert result.iterations == len(counter.steps) == 6 and trainer.xbm.last_stats["memory_fill"] == 1.0
    assert trainer.xbm.last_stats["adapted"] == (0.0 if kind == "none" else 1.0)
    # Step 1 reads nothing; every later step reads the previous step's finiteness flag, and only that.
    assert counter.steps == [[]] + [["__bool__"]] * 5
    assert result.pairs["memory_pos_pairs"] > result.pairs["batch_pos_pairs"] > 0


@needs_cuda
@pytest.mark.parametrize("kind", KINDS)
def test_twenty_adaptations_of_every_kind_never_synchronise_on_cuda(kind):
    """Bug caught: a normaliser that makes the CPU wait for the GPU (``int()``/``float()`` of a buffer,
    ``unique``, ``nonzero``, ``bincount``, a boolean mask, a blocking copy of the super-class map): CUDA's
    sync debug mode raises on each. Twenty calls as XBMLoss makes them (in place, into the memory), after a
    first call that moves the map and the running moments to the GPU."""
    from xbm.normalisers import NormaliserConfig, build_normaliser
    gen = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 40, (600,), generator=gen).cuda()
    memory = torch.randn(600, 16, generator=gen).cuda()
    batch, batch_labels = torch.randn(32, 16, generator=gen).cuda(), torch.arange(8).repeat_interleave(4).cuda()
    norm = build_normaliser(NormaliserConfig(kind=kind), superclass_of=torch.arange(40) % 6, num_labels=40).cuda()
    norm(memory, labels, batch, batch_labels, out=memory)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(20):
            norm(memory, labels, batch, batch_labels, epoch=step, out=memory)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(memory).all()


@needs_cuda
def test_twenty_enqueues_with_a_device_iteration_never_synchronise_on_cuda():
    """Bug caught: the memory writing XBMLoss's iteration counter (a 0-dim CUDA tensor) with ``index_fill_``,
    which reads the value back (``.item()``) on every step."""
    from xbm.memory import EmbeddingMemory
    memory = EmbeddingMemory(50, 8).cuda()
    iteration = torch.zeros((), dtype=torch.long, device="cuda")
    batch, labels = torch.randn(16, 8, device="cuda"), torch.arange(16, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(20):
            memory.enqueue(batch, labels, labels, iteration=iteration)
            iteration += 1
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert memory.iterations.max().item() == 19
