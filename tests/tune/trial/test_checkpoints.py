"""The checkpoint policy (tune.trial.checkpoints): the period clock, pruning, the actor waiting for the best weights."""
import pyarrow.fs as pafs

from tune.trial.checkpoints import CheckpointClock, prune_checkpoints, storage_uri
from xbm.training.best_weights import BEST_WEIGHTS


def test_the_clock_is_due_after_a_period_of_epochs_and_at_the_last():
    """Bug caught: a checkpoint every epoch whatever the period (the fixed cost this policy removes), none at
    the last epoch (a finished trial with nothing to resume or export), or the clock not reset."""
    clock = CheckpointClock(period_s=10.0)
    due = [clock.due(4.0, last=False) for _ in range(6)]
    assert due == [False, False, True, False, False, True]
    assert clock.due(1.0, last=True) and clock.since_s == 0.0
    every = CheckpointClock(period_s=0.0)
    assert all(every.due(0.001, last=False) for _ in range(3))


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


def test_a_stopped_or_reused_actor_waits_for_the_best_weights_write(monkeypatch):
    """Bug caught: ASHA stopping a trial right after an improving epoch (Tune's cleanup does not wait for the
    trial's thread, and the daemon writer dies with the actor): the row names best_weights.pt, but the file
    is missing (first rung) or holds an older epoch, so `xbm-tune export` fails on the sweep's best trial.
    (That ``finish_best_weights`` waits: tests/xbm/training/test_best_weights.py.)"""
    from tune.trial import trainable

    waited = []
    monkeypatch.setattr(trainable, "finish_best_weights", lambda: waited.append(True))
    cls = trainable.make_trainable("recall_at_1", "max")
    base = cls.__mro__[1]
    monkeypatch.setattr(base, "cleanup", lambda self: None)
    monkeypatch.setattr(base, "reset_config", lambda self, config: False)
    cls.cleanup(object.__new__(cls))
    cls.reset_config(object.__new__(cls), {})
    assert waited == [True, True]
