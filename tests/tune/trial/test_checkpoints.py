"""The checkpoint policy (tune.trial.checkpoints): the period clock, the best weights, pruning."""
import threading
import time

import pyarrow.fs as pafs
import pytest
import torch

from tune.trial.checkpoints import BEST_WEIGHTS, BestWeights, CheckpointClock, prune_checkpoints, storage_uri
from analysis.location import Folder


def test_the_clock_is_due_after_a_period_of_epochs_and_at_the_last():
    """Bug caught: a checkpoint every epoch whatever the period (the fixed cost this policy removes), none at
    the last epoch (a finished trial with nothing to resume or export), or the clock not reset."""
    clock = CheckpointClock(period_s=10.0)
    due = [clock.due(4.0, last=False) for _ in range(6)]
    assert due == [False, False, True, False, False, True]
    assert clock.due(1.0, last=True) and clock.since_s == 0.0
    every = CheckpointClock(period_s=0.0)
    assert all(every.due(0.001, last=False) for _ in range(3))


def test_best_weights_follow_the_best_epoch_by_the_sweeps_mode(tmp_path):
    """Bug caught: the last epoch's weights kept instead of the best one's, NaN (an epoch eval_every
    skipped) taken as a new best, min-mode metrics kept as if larger were better, or the file written
    before the thread finished reading the weights (a later step's values saved)."""
    model = torch.nn.Linear(2, 1)
    best = BestWeights(Folder(str(tmp_path)), str(tmp_path), "max")
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
    lower = BestWeights(Folder(str(tmp_path / "min")), str(tmp_path / "min"), "min")
    assert lower.offer(1, 2.0, model, {}) and lower.offer(2, 1.0, model, {}) and not lower.offer(3, 1.5, model, {})
    lower.wait()
    restored = BestWeights(Folder(str(tmp_path)), str(tmp_path), "max")
    restored.load_state(best.state())  # a resumed trial must not replace a better epoch by a worse one
    assert not restored.offer(4, 0.45, model, {}) and restored.epoch == 1


def test_a_failed_write_is_raised_naming_the_file(tmp_path):
    """Bug caught: a best-weights write that failed in its thread going unnoticed (the sweep's product lost)."""
    class Broken(Folder):
        def write_bytes(self, relative, payload):
            raise OSError("disk full")

    best = BestWeights(Broken(str(tmp_path)), "s3://bucket/trial_1", "max")
    best.offer(1, 0.1, torch.nn.Linear(1, 1), {})
    with pytest.raises(OSError, match="s3://bucket/trial_1/best_weights.pt.*disk full"):
        best.wait()


def test_pruning_keeps_the_newest_checkpoint_only(tmp_path):
    """Bug caught: a finished trial keeping every checkpoint (150 GB for a 200-trial ResNet50 sweep), the
    oldest kept instead of the newest, or the best weights deleted with them."""
    for n in (0, 3, 12):
        (tmp_path / f"checkpoint_{n:06d}").mkdir()
        (tmp_path / f"checkpoint_{n:06d}" / "trainer.pt").write_bytes(b"x")
    (tmp_path / BEST_WEIGHTS).write_bytes(b"w")
    deleted = prune_checkpoints(pafs.LocalFileSystem(), str(tmp_path))
    assert len(deleted) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [BEST_WEIGHTS, "checkpoint_000012"]


def test_storage_uris_are_given_back_with_their_scheme():
    """Bug caught: trials.parquet naming best weights on S3 by a bare bucket path nobody can open."""
    assert storage_uri(pafs.LocalFileSystem(), "/data/sweep/trial_1") == "/data/sweep/trial_1"
    s3 = pafs.S3FileSystem(region="us-east-1", anonymous=True)
    assert storage_uri(s3, "bucket/sweep/trial_1") == "s3://bucket/sweep/trial_1"


def test_under_pbt_checkpoints_are_pruned_when_the_sweep_ends_not_when_a_trial_does(tmp_path):
    """Bug caught: a PBT exploit restoring a finished donor's last-perturbation checkpoint that pruning had
    already deleted ("Could not recover from checkpoint as it does not exist on storage anymore"), or failed
    trials pruned at the end (resume restarts them from their checkpoints)."""
    from types import SimpleNamespace

    from tune.trial.checkpoints import KeepLatestCheckpoint

    def trial(name, status):
        for n in (1, 2):
            (tmp_path / name / f"checkpoint_{n:06d}").mkdir(parents=True)
        storage = SimpleNamespace(storage_filesystem=pafs.LocalFileSystem(), trial_fs_path=str(tmp_path / name))
        return SimpleNamespace(storage=storage, status=status)

    done, failed = trial("done", "TERMINATED"), trial("failed", "ERROR")
    keep = KeepLatestCheckpoint(at_end=True)
    keep.on_trial_complete(0, [done, failed], done)
    assert len(list((tmp_path / "done").iterdir())) == 2  # still there while the population may need it
    keep.on_experiment_end([done, failed])
    assert [p.name for p in (tmp_path / "done").iterdir()] == ["checkpoint_000002"]
    assert len(list((tmp_path / "failed").iterdir())) == 2


class SlowStorage(Folder):
    """Writes as slowly as ~100 MB of ResNet50 weights on a network disk."""

    def write_bytes(self, relative, payload):
        import time

        time.sleep(0.5)
        super().write_bytes(relative, payload)


def test_a_stopped_or_reused_actor_waits_for_the_best_weights_write(tmp_path, monkeypatch):
    """Bug caught: ASHA stopping a trial right after an improving epoch (Tune's cleanup does not wait for the
    trial's thread, and the daemon writer dies with the actor): the row names best_weights.pt, but the file
    is missing (first rung) or holds an older epoch, so `xbm-tune export` fails on the sweep's best trial."""
    from tune.trial import trainable
    from tune.trial.checkpoints import finish_best_weights

    best = BestWeights(SlowStorage(str(tmp_path)), str(tmp_path), "max")
    best.offer(1, 0.5, torch.nn.Linear(2, 1), {})
    finish_best_weights()
    assert torch.load(tmp_path / BEST_WEIGHTS, weights_only=True)["epoch"] == 1
    finish_best_weights()  # nothing pending: returns at once

    waited = []
    monkeypatch.setattr(trainable, "finish_best_weights", lambda: waited.append(True))
    cls = trainable.make_trainable("recall_at_1", "max")
    base = cls.__mro__[1]
    monkeypatch.setattr(base, "cleanup", lambda self: None)
    monkeypatch.setattr(base, "reset_config", lambda self, config: False)
    cls.cleanup(object.__new__(cls))
    cls.reset_config(object.__new__(cls), {})
    assert waited == [True, True]


def test_a_wait_that_overlaps_a_new_write_leaves_no_write_behind(tmp_path):
    """Bug caught: the actor's cleanup waiting while the trial's thread offered a new epoch: cleanup's wait,
    back from joining the old write, cleared the new one, which then nobody waited for (lost with the actor)."""
    from tune.trial.checkpoints import _PENDING

    best = BestWeights(SlowStorage(str(tmp_path)), str(tmp_path), "max")
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
