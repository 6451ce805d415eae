"""The best weights (xbm/training/best_weights.py), for ``xbm-tune train``'s folder and a sweep trial's storage alike:
the best epoch by the mode, the write in the background and waited for, a failed write named."""
import threading
import time
from pathlib import Path

import pytest
import torch

from xbm.training.best_weights import _PENDING, BEST_WEIGHTS, BestWeights, finish_best_weights


class LocalStorage:
    """A folder that writes bytes, as ``analysis.location.Folder`` does for a sweep's storage."""

    def __init__(self, folder) -> None:
        self.folder = Path(folder)

    def write_bytes(self, relative: str, payload: bytes) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / relative).write_bytes(payload)


def test_best_weights_follow_the_best_epoch_by_the_sweeps_mode(tmp_path):
    """Bug caught: the last epoch's weights kept instead of the best one's, NaN (an epoch eval_every
    skipped) taken as a new best, min-mode metrics kept as if larger were better, or the file written
    before the thread finished reading the weights (a later step's values saved)."""
    model = torch.nn.Linear(2, 1)
    best = BestWeights(LocalStorage(tmp_path), str(tmp_path), "max")
    assert best.uri is None
    with torch.no_grad():
        model.weight.fill_(1.0)
    assert best.offer(1, 0.5, model, {"metric": "recall_at_1"})
    with torch.no_grad():
        model.weight.fill_(2.0)  # changed right after the offer: the kept copy must not follow
    assert not best.offer(2, float("nan"), model, {}) and not best.offer(3, 0.4, model, {})
    best.wait()
    saved = torch.load(tmp_path / BEST_WEIGHTS, weights_only=True)
    assert saved["epoch"] == 1 and saved["value"] == 0.5 and saved["metric"] == "recall_at_1"
    assert torch.equal(saved["model"]["weight"], torch.ones(1, 2))
    assert best.uri == f"{tmp_path}/{BEST_WEIGHTS}"
    lower = BestWeights(LocalStorage(tmp_path / "min"), str(tmp_path / "min"), "min")
    assert lower.offer(1, 2.0, model, {}) and lower.offer(2, 1.0, model, {}) and not lower.offer(3, 1.5, model, {})
    lower.wait()
    restored = BestWeights(LocalStorage(tmp_path), str(tmp_path), "max")
    restored.load_state(best.state())  # a resumed trial must not replace a better epoch by a worse one
    assert not restored.offer(4, 0.45, model, {}) and restored.epoch == 1


def test_a_failed_write_is_raised_naming_the_file(tmp_path):
    """Bug caught: a best-weights write that failed in its thread going unnoticed (the sweep's product lost)."""
    class Broken(LocalStorage):
        def write_bytes(self, relative, payload):
            raise OSError("disk full")

    best = BestWeights(Broken(tmp_path), "s3://bucket/trial_1", "max")
    best.offer(1, 0.1, torch.nn.Linear(1, 1), {})
    with pytest.raises(OSError, match="s3://bucket/trial_1/best_weights.pt.*disk full"):
        best.wait()


def test_a_local_folder_gets_the_same_file_written_atomically(tmp_path):
    """Bug caught: ``xbm-tune train``'s best weights (a local folder, no storage) kept by a second copy of this
    class drifting from the sweep's (another payload, another tie rule), or a half-written file left under the
    final name."""
    best = BestWeights.in_folder(tmp_path)
    model = torch.nn.Linear(2, 1)
    assert best.offer(1, 0.5, model, {"metric": "recall_at_1"}) and not best.offer(2, 0.5, model, {})
    best.wait()
    saved = torch.load(tmp_path / BEST_WEIGHTS, weights_only=True)
    assert (saved["epoch"], saved["value"], saved["metric"]) == (1, 0.5, "recall_at_1")
    assert sorted(p.name for p in tmp_path.iterdir()) == [BEST_WEIGHTS] and best.uri == f"{tmp_path}/{BEST_WEIGHTS}"


class SlowStorage(LocalStorage):
    """Writes as slowly as ~100 MB of ResNet50 weights on a network disk."""

    def write_bytes(self, relative, payload):
        import time

        time.sleep(0.5)
        super().write_bytes(relative, payload)


def test_finish_best_weights_waits_for_every_pending_write(tmp_path):
    """Bug caught: a Ray actor ending (ASHA's stop, a reused actor) while the daemon thread still writes the best
    weights the trial's row already names: ``finish_best_weights`` returns only once the file has landed."""
    best = BestWeights(SlowStorage(tmp_path), str(tmp_path), "max")
    best.offer(1, 0.5, torch.nn.Linear(2, 1), {})
    finish_best_weights()
    assert torch.load(tmp_path / BEST_WEIGHTS, weights_only=True)["epoch"] == 1
    finish_best_weights()  # nothing pending: returns at once


def test_a_wait_that_overlaps_a_new_write_leaves_no_write_behind(tmp_path):
    """Bug caught: the actor's cleanup waiting while the trial's thread offered a new epoch: cleanup's wait,
    back from joining the old write, cleared the new one, which then nobody waited for (lost with the actor)."""
    best = BestWeights(SlowStorage(tmp_path), str(tmp_path), "max")
    model = torch.nn.Linear(2, 1)
    key = f"{tmp_path}/{BEST_WEIGHTS}"

    class OldWrite:  # the old write; while cleanup joins it, the trial's thread offers epoch 2
        offered = False

        def join(self):
            if not self.offered:
                self.offered = True
                threading.Thread(target=best.offer, args=(2, 0.9, model, {})).start()
                while not best._files.pending() or best._files._writes.get(key) is self:
                    time.sleep(0.01)   # until the trial's thread has saved epoch 2

    best._files._writes[key] = OldWrite()
    _PENDING.add(best)
    best.wait()   # cleanup's wait: it returns once epoch 2 has landed too, or leaves it pending
    if best._files.pending():
        assert best in _PENDING
        best.wait()
    assert torch.load(tmp_path / BEST_WEIGHTS, weights_only=True)["epoch"] == 2 and best not in _PENDING
