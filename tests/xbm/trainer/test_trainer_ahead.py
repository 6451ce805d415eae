"""The next epoch's pass drawn when a training pass ends (``prefetch_next_epoch``, ``Trainer._draw_ahead``)."""
from __future__ import annotations

import multiprocessing
import os
import random
import time

import numpy as np
import pytest
import torch

from xbm.trainer import Trainer
from xbm.training.loaders import TRAIN_PREFETCH

from ..conftest import saved_state, tiny_config

# an image run with one loader worker: the pass is drawn ahead only where workers can prepare it
IMAGES = dict(dataset="digits", model="test_resnet", image_size=16, batch_size=20, embedding_size=16,
              warmup_epochs=0, num_workers="1", epochs=3, **{"memory.ratio": 0.5, "normaliser.kind": "xbn"})


def _losses(trainer: Trainer) -> list[float]:
    return [row["loss"] for row in trainer.fit()]


def _resumed_after_first_epoch(**values) -> tuple[Trainer, list[float]]:
    """The first epoch's row, then a checkpoint (taken while the second pass is drawn ahead), resumed."""
    first = Trainer(tiny_config(**values))
    losses = [next(first.fit())["loss"]]
    resumed = Trainer(tiny_config(**values))
    resumed.load_state_dict(saved_state(first))
    return first, losses + _losses(resumed)


@pytest.mark.slow
def test_a_pass_drawn_ahead_trains_the_batches_of_one_drawn_when_its_epoch_starts_and_resumes_to_them():
    """Bugs caught: drawing the next pass before evaluation moved the sampler's or an RNG stream's draws
    against the run that draws it when the epoch starts; and a checkpoint taken while the pass was drawn
    ahead kept the state after the draw, so the resumed run drew another pass (other batches, other losses)."""
    drawn = _losses(Trainer(tiny_config(**IMAGES)))
    at_start = _losses(Trainer(tiny_config(**IMAGES, prefetch_next_epoch=False)))
    first, resumed = _resumed_after_first_epoch(**IMAGES)
    assert first.ahead is not None and first.ahead.epoch_index == 1   # the checkpoint saw a pass drawn ahead
    assert drawn == at_start == resumed
    assert len(set(drawn)) == 3   # three epochs, three different losses: the batches did move on


@pytest.mark.slow
def test_an_evaluation_that_draws_random_numbers_changes_nothing_after_it(monkeypatch):
    """Bug caught: an evaluation step drawing from Python's, NumPy's or torch's global stream (a k-means
    initialisation, a random probe) moved every later batch: evaluating every epoch trained another model than
    evaluating only the last, and a pass drawn before evaluation differed from the same pass after a resume."""
    evaluate = Trainer._evaluate

    def drawing(self, epoch):
        random.random(), np.random.rand(), torch.rand(1)
        return evaluate(self, epoch)

    monkeypatch.setattr(Trainer, "_evaluate", drawing)
    every = _losses(Trainer(tiny_config(**IMAGES)))
    last_only = _losses(Trainer(tiny_config(**IMAGES, eval_every=3)))
    _, resumed = _resumed_after_first_epoch(**IMAGES)
    assert every == last_only == resumed


class _CountedFetches:
    """Counts the samples the loader's worker processes fetch (forked workers share the counter)."""

    def __init__(self, monkeypatch, dataset_type) -> None:
        self.count, self.main = multiprocessing.Value("i", 0), os.getpid()
        fetch = dataset_type.__getitem__

        def counted(dataset, index):
            if os.getpid() != self.main:
                with self.count.get_lock():
                    self.count.value += 1
            return fetch(dataset, index)

        monkeypatch.setattr(dataset_type, "__getitem__", counted)


@pytest.mark.slow
@pytest.mark.skipif(multiprocessing.get_start_method() != "fork", reason="counts through a class patched before fork")
def test_the_workers_prepare_the_next_pass_before_its_epoch_starts(monkeypatch):
    """Bug caught: the next pass drawn but its loader not started (the sampler advanced, nothing prepared),
    so the epoch still waited for its first batches, or handed over without a length (a bar without a total);
    or started for an objective whose pass depends on the row
    (the neighbours' pools) or where the next epoch fills the memory first."""
    trainer = Trainer(tiny_config(**IMAGES))
    fetches = _CountedFetches(monkeypatch, type(trainer.loader.dataset))
    trainer.prepare()
    trainer._main_epoch(1)
    # the first pass, then the second's first batches: as many as the worker prepares ahead (then it waits)
    want = (len(trainer.loader) + TRAIN_PREFETCH) * IMAGES["batch_size"]
    deadline = time.monotonic() + 60
    while fetches.count.value < want and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fetches.count.value == want
    assert trainer.epoch == 1 and trainer.passes == 2
    assert len(trainer.ahead.batches) == len(trainer.loader)   # a progress bar (the CLI's tqdm) knows its total

    for values in ({"objective": "neighbours"}, {"memory.prefill": True, "memory.start_epoch": 1},
                   {"prefetch_next_epoch": False}, {"num_workers": "0"}):
        other = Trainer(tiny_config(**{**IMAGES, **values}))
        other.prepare()
        other._main_epoch(1)
        assert other.ahead is None, values


@pytest.mark.slow
def test_a_trainer_that_drew_a_pass_then_loads_another_state_trains_that_state_s_batches():
    """Bug caught: population-based training loads a better trial's checkpoint into a trainer whose own next
    pass was already drawn; that stale pass (another epoch's indices and seeds) trained the loaded epoch."""
    donor = Trainer(tiny_config(**IMAGES))
    next(donor.fit())

    def loaded(trainer: Trainer) -> list[float]:
        trainer.load_state_dict(saved_state(donor))
        return _losses(trainer)

    ahead = Trainer(tiny_config(**IMAGES))
    epochs = ahead.fit()
    next(epochs), next(epochs)   # two epochs: the third's pass is drawn
    assert ahead.ahead is not None and ahead.ahead.epoch_index == 2
    assert loaded(ahead) == loaded(Trainer(tiny_config(**IMAGES)))
