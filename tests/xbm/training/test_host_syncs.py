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
    def __init__(self) -> None:
        self.on, self.calls = False, []

    def wrap(self, name, original):
        def counted(tensor, *args, **kwargs):
            if self.on:
                self.calls.append(name)
            return original(tensor, *args, **kwargs)
        return counted


def _counted_loader(loader, counter):
    """The loader with counting paused inside ``next`` (building a batch is not the step)."""
    for batch in loader:
        counter.on = True
        yield batch
        counter.on = False


def _main_step(trainer):
    trainer.model.train()
    return Step(trainer.model, trainer.objective, trainer.criterion(0), trainer.optimizer, trainer.scaler,
                list(trainer.model.parameters()), trainer.cfg.clip_grad, trainer.prepare_train)


@pytest.mark.parametrize("kind", KINDS)
def test_a_step_reads_the_device_at_most_once_for_every_normaliser_kind(kind, monkeypatch):
    """Bugs caught (issue 18): ``loss.item()`` plus pair counts read with ``float()`` every step; the
    normalisers reading their scalar state (AXBN's gain, the call count) or checking label ranges with
    ``int()`` every step; PC-XBN/SC-XBN reading group sizes back; the in-batch loss's ``.any()`` checks; a
    second mining for the statistics. The epoch's sums are read once, at its end."""
    trainer = tiny_trainer(**{"normaliser.kind": kind, "memory.ratio": 0.5})
    # A first epoch fills the memory so that every kind adapts in the counted one.
    run_epoch(_main_step(trainer), trainer.loader, trainer.runtime, epoch=1, epoch_index=0)
    counter = Counter()
    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, counter.wrap(name, getattr(torch.Tensor, name)))
    monkeypatch.setattr(epoch_module, "_raise_if_bad", _pausing(epoch_module._raise_if_bad, counter))
    result = run_epoch(_main_step(trainer), _counted_loader(trainer.loader, counter), trainer.runtime, epoch=2,
                       epoch_index=1)
    assert result.iterations == 6 and trainer.xbm.last_stats["memory_fill"] == 1.0
    if kind != "none":
        assert trainer.xbm.last_stats["adapted"] == 1.0
    # One finiteness check per step (bool of a 0-dim tensor), nothing else while the steps run.
    print(counter.calls); import traceback
    assert counter.calls == ["__bool__"] * 6


def _pausing(check, counter):
    """``_raise_if_bad`` as is, but its read recorded as the step's one check (``__bool__``)."""
    return check
