"""``xbm.training.checkpoint``: a trainer's saved state comes back; a bad file is named; a checkpoint written in
the background holds the state as it was when saved, lands in order, and never fails silently."""
import collections
import pickle
import threading

import pytest
import torch

from xbm.training.checkpoint import CheckpointWriter, improves, load_checkpoint
from xbm.errors import BadCheckpointError

from ..conftest import needs_cuda, tiny_trainer


@pytest.mark.parametrize("value, best, mode, expected", [
    (0.5, None, "max", True), (0.5, None, "min", True),        # the first finite value is the best so far
    (0.6, 0.5, "max", True), (0.4, 0.5, "max", False),
    (0.4, 0.5, "min", True), (0.6, 0.5, "min", False),          # a loss: lower is better
    (0.5, 0.5, "max", False), (0.5, 0.5, "min", False),         # a tie keeps the earlier epoch
    (float("nan"), None, "max", False), (float("inf"), 0.5, "max", False), (float("-inf"), 0.5, "min", False),
    (None, None, "max", False), (True, None, "max", False), ("0.9", None, "max", False),
    (1, 0.5, "max", True), (torch.tensor(0.9).item(), 0.5, "max", True)])
def test_improves_takes_only_a_strictly_better_finite_number(value, best, mode, expected):
    """Bugs caught: a NaN or inf epoch (a diverged run) or a bool kept as the best weights; a minimised metric
    (a loss) compared as maximised; a tie moving the best epoch to a later one. The one rule behind
    ``xbm-tune train``'s and a sweep trial's ``best_weights.pt``."""
    assert improves(value, best, mode) is expected


def test_improves_refuses_an_unknown_mode():
    """Bug caught: mode="maximize" (Optuna's word) silently read as "min"."""
    with pytest.raises(ValueError, match="mode must be 'max' or 'min', but got 'maximize'"):
        improves(0.5, None, "maximize")


def test_a_saved_state_round_trips(tmp_path):
    """Bug caught: the loader dropping weights_only's safety or mapping tensors off the CPU, so a state a
    trainer wrote no longer restores."""
    trainer = tiny_trainer()
    list(trainer.fit())
    torch.save(trainer.state_dict(), tmp_path / "trainer.pt")
    state = load_checkpoint(tmp_path / "trainer.pt")
    assert state["epoch"] == 1 and state["model"]["head.weight"].device.type == "cpu"
    resumed = tiny_trainer()
    resumed.load_state_dict(state)
    assert torch.equal(resumed.model.head.weight, trainer.model.head.weight)


def test_a_truncated_checkpoint_is_named(tmp_path):
    """Bug caught: a truncated checkpoint (a node died while writing) failing with torch's
    "PytorchStreamReader failed reading zip archive", which says nothing of which trial's file is bad."""
    path = tmp_path / "trainer.pt"
    torch.save(tiny_trainer().state_dict(), path)
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(BadCheckpointError) as info:
        load_checkpoint(path)
    assert f"cannot read checkpoint {path}: " in str(info.value) and info.value.path == str(path)
    assert str(pickle.loads(pickle.dumps(info.value))) == str(info.value)  # Ray ships it between processes


def test_a_missing_checkpoint_stays_a_file_not_found(tmp_path):
    """Bug caught: a missing file reported as corrupt (the user would inspect a file that is not there)."""
    with pytest.raises(FileNotFoundError, match="trainer.pt"):
        load_checkpoint(tmp_path / "trainer.pt")


def _gated_saves(monkeypatch):
    """torch.save's first call held back until the returned event is set; later calls run at once."""
    gate, save, calls = threading.Event(), torch.save, []

    def gated(obj, path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 1:
            assert gate.wait(10), "the test never opened the gate"
        return save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", gated)
    return gate


def test_a_background_checkpoint_holds_the_state_as_it_was_when_saved(tmp_path, monkeypatch):
    """Bug caught: a write in the background that serialises the live tensors, so the next epoch's in-place
    optimiser steps reach the file (checkpoint.pt holding weights of epoch N+1 labelled epoch N)."""
    gate = _gated_saves(monkeypatch)
    weights = torch.arange(4.0)
    state = {"epoch": 3, "model": collections.OrderedDict(w=weights), "rng": (torch.tensor([7]), [1, 2])}
    writer = CheckpointWriter()
    writer.save(state, tmp_path / "checkpoint.pt")
    weights.add_(100.0)                 # the next step, while the write waits
    state["rng"][1].append(3)           # a plain value changed in place too
    gate.set()
    writer.wait()
    saved = load_checkpoint(tmp_path / "checkpoint.pt")
    assert saved["epoch"] == 3 and torch.equal(saved["model"]["w"], torch.arange(4.0))
    assert isinstance(saved["model"], collections.OrderedDict) and saved["rng"][1] == [1, 2]
    assert not (tmp_path / "checkpoint.pt.tmp").exists()


def test_a_second_save_to_a_path_waits_for_the_first(tmp_path, monkeypatch):
    """Bug caught: two writes to one path racing, so a slow older state lands after the newer one (a resumed
    run would go back an epoch)."""
    gate = _gated_saves(monkeypatch)
    writer = CheckpointWriter()
    writer.save({"epoch": 1}, tmp_path / "checkpoint.pt")
    threading.Timer(0.2, gate.set).start()   # the first write ends only after the second save was asked for
    writer.save({"epoch": 2}, tmp_path / "checkpoint.pt")
    writer.wait()
    for thread in threading.enumerate():   # any write the writer lost track of lands too
        if thread.name == "save checkpoint.pt":
            thread.join(10)
    assert load_checkpoint(tmp_path / "checkpoint.pt")["epoch"] == 2


def test_a_wait_while_a_write_is_being_started_waits_for_it(tmp_path, monkeypatch):
    """Bug caught (a full suite run, 2026-11-27): save() registered its thread before starting it, so a wait()
    from another thread in between (a trial's actor cleaning up while the trial offered a new best epoch)
    joined a thread not yet started: "RuntimeError: cannot join thread before it is started". Here the start
    is held back until the other thread's wait() has had its chance."""
    import xbm.training.checkpoint as checkpoint

    writer, errors, plain_thread = CheckpointWriter(), [], threading.Thread

    def wait():
        try:
            writer.wait()
        except BaseException as exc:
            errors.append(exc)

    waiters = []

    class SlowToStart(plain_thread):
        def start(self):
            waiters.append(plain_thread(target=wait))
            waiters[-1].start()
            waiters[-1].join(0.3)   # the wait() runs while this write is registered or not, but not started
            super().start()

    monkeypatch.setattr(checkpoint.threading, "Thread", SlowToStart)
    writer.save({"epoch": 1}, tmp_path / "checkpoint.pt")
    writer.wait()
    waiters[0].join(10)
    assert not errors, errors
    assert load_checkpoint(tmp_path / "checkpoint.pt")["epoch"] == 1


def test_a_failed_background_write_is_raised_naming_the_file(tmp_path):
    """Bug caught: a write that fails in its thread (disk full, folder gone) and is never reported, so the user
    trusts a checkpoint that is not there."""
    writer = CheckpointWriter()
    path = tmp_path / "gone" / "checkpoint.pt"
    writer.save({"epoch": 1}, path)
    with pytest.raises(OSError, match=f"could not write {path}"):
        writer.wait()
    writer.wait()   # said once: the run can still end


def _recording_writes(gate_first: bool = False):
    """A ``write`` for ``CheckpointWriter.save`` that keeps each snapshot's tensors as they read when written
    (cloned: the writer reuses the snapshot's memory) and their data pointers; the first write waits for the
    returned gate when ``gate_first``."""
    gate, seen = threading.Event(), []

    def write(snapshot):
        if gate_first and not seen:
            assert gate.wait(10), "the test never opened the gate"
        seen.append({k: (v.clone(), v.data_ptr()) for k, v in snapshot.items()})

    if not gate_first:
        gate.set()
    return write, gate, seen


def test_a_files_next_save_reuses_its_host_buffers_with_the_new_values():
    """Bugs caught: host memory allocated afresh at every save (the page faults, on a GPU a pinned allocation,
    each epoch: the CPU wait fell from 0.061 to 0.026 s with reuse), or a reused buffer not refreshed, so
    every later file holds the first epoch's weights."""
    write, _, seen = _recording_writes()
    writer, weights = CheckpointWriter(), torch.arange(6.0).reshape(2, 3)
    for _ in range(3):
        writer.save({"w": weights}, "best_weights.pt", write=write)
        weights.add_(10.0)
    writer.wait()
    assert [s["w"][0].tolist() for s in seen] == [[[0, 1, 2], [3, 4, 5]], [[10, 11, 12], [13, 14, 15]],
                                                  [[20, 21, 22], [23, 24, 25]]]
    assert len({s["w"][1] for s in seen}) == 1 and seen[0]["w"][1] != weights.data_ptr()


def test_a_write_still_running_keeps_its_buffers_from_the_next_save_to_its_file():
    """Bug caught: the next save's copy into the file's reused buffers made before the last write to that file
    has landed, so a slow disk or S3 write serialises part of the next epoch's state."""
    write, gate, seen = _recording_writes(gate_first=True)
    writer = CheckpointWriter()
    writer.save({"w": torch.zeros(3)}, "checkpoint.pt", write=write)
    threading.Timer(0.2, gate.set).start()   # the first write ends only after the second save was asked for
    writer.save({"w": torch.ones(3)}, "checkpoint.pt", write=write)
    writer.wait()
    assert [s["w"][0].tolist() for s in seen] == [[0, 0, 0], [1, 1, 1]]


def test_two_files_never_share_host_buffers(tmp_path, monkeypatch):
    """Bug caught: one set of buffers for the writer, so the next epoch's checkpoint.pt copy overwrites the
    weights best_weights.pt is still writing (a best-weights file holding a later epoch's weights)."""
    gate = _gated_saves(monkeypatch)   # the first file's write waits
    writer, weights = CheckpointWriter(), torch.zeros(4)
    writer.save({"model": weights}, tmp_path / "best_weights.pt")
    writer.save({"model": weights}, tmp_path / "checkpoint.pt")
    weights.add_(1.0)                   # the next epoch
    writer.save({"model": weights}, tmp_path / "checkpoint.pt")
    gate.set()
    writer.wait()
    assert torch.equal(load_checkpoint(tmp_path / "best_weights.pt")["model"], torch.zeros(4))
    assert torch.equal(load_checkpoint(tmp_path / "checkpoint.pt")["model"], torch.ones(4))


def test_a_state_whose_tensors_change_layout_gets_fitting_buffers(tmp_path):
    """Bugs caught: a buffer reused by position whose shape no longer matches: a 1-element tensor copied into
    the 3-element buffer of the save before broadcasts ([5, 5, 5] saved for [5]); an optimiser state that
    appears after the first step shifting every later tensor onto a wrong-sized buffer; a channels-last
    weight saved with another layout's strides."""
    writer, path = CheckpointWriter(), tmp_path / "checkpoint.pt"
    conv = torch.randn(4, 3, 2, 2).to(memory_format=torch.channels_last)
    writer.save({"a": torch.zeros(3), "conv": conv}, path)
    writer.save({"optimizer": {"exp_avg": torch.ones(2, 2)}, "a": torch.tensor([5.0]), "conv": conv}, path)
    writer.wait()
    saved = load_checkpoint(path)
    assert torch.equal(saved["a"], torch.tensor([5.0])) and torch.equal(saved["optimizer"]["exp_avg"],
                                                                         torch.ones(2, 2))
    assert torch.equal(saved["conv"], conv) and saved["conv"].stride() == conv.stride()


@needs_cuda
def test_a_gpu_state_saved_while_the_next_steps_run_holds_the_values_it_had(tmp_path):
    """Bugs caught (CUDA only): the queued device-to-host copies read by the write before they ran (zeros or
    half-copied weights on disk), copies into pageable memory queued as non-blocking, or the next step's
    in-place update reaching the copy. The state is changed on the GPU right after ``save`` returns."""
    writer, path = CheckpointWriter(), tmp_path / "checkpoint.pt"
    weights = torch.arange(1 << 22, dtype=torch.float32, device="cuda")   # 16 MB: a copy that takes a while
    moments = torch.ones(1 << 20, device="cuda")
    for epoch in range(3):
        torch.cuda._sleep(100_000_000)   # the GPU still busy with the epoch's last steps: the copies queue behind
        writer.save({"epoch": epoch, "model": {"w": weights}, "optimizer": [moments]}, path)
        weights.mul_(2.0).add_(1.0)   # the next epoch's steps, queued behind the copies
        moments.add_(1.0)
        writer.wait()
        saved = load_checkpoint(path)
        expected = torch.arange(1 << 22, dtype=torch.float32)
        for _ in range(epoch):
            expected = expected * 2.0 + 1.0
        assert saved["epoch"] == epoch and torch.equal(saved["model"]["w"], expected)
        assert torch.equal(saved["optimizer"][0], torch.full((1 << 20,), float(epoch + 1)))
    packs = writer._buffers[path]._packs.values()
    assert packs and all(pack.pinned and pack.host.is_pinned() for pack in packs)
