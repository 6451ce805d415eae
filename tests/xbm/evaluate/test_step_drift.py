"""Drift at Δt iterations (XBM Eq. 2, Fig. 3) against stored model copies, its schedule, and its resume."""
import copy
import io
import math

import pytest
import torch

from xbm.evaluate.step_drift import StepDrift, drift_names
from xbm.training.epoch import run_epoch

from ..conftest import tiny_trainer


def _recording(trainer, deltas):
    """The trainer's drift at ``deltas`` and a copy of its model after every main step (key: iteration)."""
    trainer.step_drift.deltas = deltas
    copies = {}
    tracker = trainer.step_drift
    begin, after = tracker.begin_epoch, tracker.after_step

    def begin_epoch(length):
        copies.setdefault(tracker.iteration, copy.deepcopy(trainer.model))
        begin(length)

    def after_step():
        after()
        copies[tracker.iteration] = copy.deepcopy(trainer.model)

    tracker.begin_epoch, tracker.after_step = begin_epoch, after_step
    return copies


def test_drift_at_delta_iterations_is_the_probes_move_against_stored_model_copies():
    """Bugs caught: drift measured between epochs (or from the epoch's start) instead of over exactly Δt steps;
    a gap that spans epochs losing its earlier snapshot; a value reported before Δt steps have run (must be
    None); training-mode embeddings (BatchNorm, dropout) instead of the probe's eval view."""
    trainer = tiny_trainer(epochs=3)
    length = len(trainer.loader)
    deltas = (1, length + 2, 3 * length + 1)   # within an epoch, across one epoch end, beyond the run
    copies = _recording(trainer, deltas)
    for epoch, metrics in enumerate(trainer.fit(), start=1):
        end = epoch * length
        for delta in deltas:
            if end < delta:
                assert metrics[f"drift_{delta}_mean"] is None and metrics[f"drift_{delta}_max"] is None
                continue
            now, then = (trainer.embed(copies[t], trainer.train_view, trainer.probe)[0] for t in (end, end - delta))
            distances = (now - then).norm(dim=1)
            assert metrics[f"drift_{delta}_mean"] == pytest.approx(float(distances.mean()), rel=1e-5)
            assert metrics[f"drift_{delta}_max"] == pytest.approx(float(distances.max()), rel=1e-5)
            assert metrics[f"drift_{delta}_mean"] > 0
    assert metrics[f"drift_{length + 2}_mean"] is not None and epoch == 3


def test_the_probe_is_embedded_only_where_a_measurement_needs_it():
    """Bug caught: the probe embedded at every step (a forward pass of the probe per step), or snapshots kept
    for ever (memory growing with the run)."""
    calls = []
    tracker = StepDrift(lambda: calls.append(tracker.iteration) or torch.zeros(2, 3), deltas=(2, 5))
    for _ in range(3):
        tracker.begin_epoch(4)
        for _ in range(4):
            tracker.after_step()
    # ends 4, 8, 12; snapshots at end - 2 and end - 5 (planned one epoch ahead), and the start for 4 - 5 < 0
    assert calls == [2, 3, 4, 6, 7, 8, 10, 11, 12]
    assert sorted(tracker.snapshots) == [7, 8, 10, 11, 12]
    assert tracker.metrics() == {"drift_2_mean": 0.0, "drift_2_max": 0.0, "drift_5_mean": 0.0, "drift_5_max": 0.0}
    assert drift_names() == ("drift_10_mean", "drift_10_max", "drift_100_mean", "drift_100_max",
                             "drift_1000_mean", "drift_1000_max")


def _run(tracker, epochs, length=4):
    out = []
    for _ in range(epochs):
        tracker.begin_epoch(length)
        for _ in range(length):
            tracker.after_step()
        out.append(tracker.metrics())
    return out


def test_a_resumed_tracker_reports_the_drift_of_the_uninterrupted_one():
    """Bug caught: the snapshots and step count left out of the checkpoint (or not loadable with
    ``weights_only=True``), so a resumed run reports None, or a drift over another gap, for a Δt that spans the
    checkpoint. (A whole trainer's resume: test_trainer's resume test compares every metric, these included.)"""
    def tracker():
        made = StepDrift(lambda: torch.full((3, 2), float(made.iteration) ** 2), deltas=(2, 6))
        return made

    want = _run(tracker(), 3)
    first = tracker()
    _run(first, 1)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    resumed = tracker()
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert want[1:] == _run(resumed, 2)
    assert want[0]["drift_6_mean"] is None and want[1]["drift_6_mean"] == pytest.approx(math.sqrt(2) * (64 - 4))


def test_deltas_must_be_positive_integers():
    with pytest.raises(ValueError, match=r"deltas must be positive integers \(iterations\), but got \(0, 10\)"):
        StepDrift(lambda: torch.zeros(1, 1), deltas=(0, 10))


def test_steps_that_embed_no_probe_read_nothing_and_the_probe_is_read_at_most_once_per_snapshot():
    """Bug caught: the drift hook reading the device at every step (e.g. a distance turned into a float when
    measured), which makes every CUDA step wait; only the epoch's metrics read the measurement, once."""
    from ..training.device_reads import DeviceReads, stepped
    from ..training.test_host_syncs import CHECK, _main_step

    trainer = tiny_trainer(**{"memory.ratio": 0.5})
    trainer.step_drift.deltas = (3,)
    step = _main_step(trainer)
    step.on_step = trainer.step_drift.after_step
    batches = (list(trainer.loader) * 10)[:10]
    trainer.step_drift.begin_epoch(len(batches))   # snapshots after steps 7 and 10
    with DeviceReads() as reads:
        run_epoch(step, stepped(batches, reads), trainer.runtime, epoch=1, epoch_index=0)
    for i, ops in enumerate(reads.steps[1:-1], start=1):
        extra = [op for op in ops if op != CHECK]
        assert extra == [] or i in (7, 10), f"step {i}: {extra}"
    with DeviceReads() as reads:
        reads.new_step()
        reads.counting = True
        trainer.step_drift.metrics()
    assert [op.op for op in reads.steps[-1]] == ["tolist"]
