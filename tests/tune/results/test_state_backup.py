"""tune/results/state_backup.py: the experiment state's backup and how resume mends a torn state with it."""
from __future__ import annotations

import json
import os
import pickle
import zipfile
from types import SimpleNamespace

import pyarrow.fs as pafs
import pytest

from tune.errors import SweepInputError
from tune.results.state_backup import STATE_BACKUP, StateBackup, repair_state, whole

STATE = "experiment_state-2026-11-28_22-29-11.json"
SEARCHER = "basic-variant-state-2026-11-28_22-29-11.json"


def trial(staging, sweep):
    """What StateBackup reads of a Tune trial: its storage context's staging folder and sweep folder."""
    storage = SimpleNamespace(experiment_driver_staging_path=str(staging), experiment_fs_path=str(sweep),
                              storage_filesystem=pafs.LocalFileSystem())
    return SimpleNamespace(storage=storage)


def test_a_truncated_json_or_pickle_is_not_whole():
    """Bug caught: a pickle cut short (the searcher's state) passing as whole, so resume would hand it to Tune."""
    data = pickle.dumps({"trials": list(range(100))}, protocol=5)
    assert whole("searcher-state-x.pkl", data) and not whole("searcher-state-x.pkl", data[:-1])
    assert whole(SEARCHER, data) and not whole(SEARCHER, data[:40])  # Tune pickles it under a .json name
    assert whole(STATE, b'{"trial_data": []}') and not whole(STATE, b'{"trial_data": [') and not whole(STATE, b"")
    assert whole("tuner.pkl", data) and not whole("other.bin", b"")


def test_the_backup_holds_the_staging_folders_top_files_and_is_rewritten_only_when_they_change(tmp_path):
    """Bugs caught: a backup that packs the TensorBoard events below the staging folder (every snapshot would
    copy them again), and one rewritten at every controller step (several a second) when nothing changed."""
    staging, sweep = tmp_path / "staging", tmp_path / "sweep"
    (staging / "tensorboard").mkdir(parents=True)
    sweep.mkdir()
    (staging / STATE).write_text('{"step": 1}')
    (staging / SEARCHER).write_text('{"searcher": 1}')
    (staging / "tensorboard" / "events").write_bytes(b"x" * 100)
    backup, callback = StateBackup(), [trial(staging, sweep)]
    backup.on_step_end(iteration=1, trials=callback)
    with zipfile.ZipFile(sweep / STATE_BACKUP) as pack:
        assert pack.namelist() == [SEARCHER, STATE] and pack.read(STATE) == b'{"step": 1}'
    os.utime(sweep / STATE_BACKUP, ns=(0, 0))
    backup.on_step_end(iteration=2, trials=callback)
    assert os.stat(sweep / STATE_BACKUP).st_mtime_ns == 0  # unchanged: not written again
    (staging / STATE).write_text('{"step": 22}')
    backup.on_step_end(iteration=3, trials=callback)
    with zipfile.ZipFile(sweep / STATE_BACKUP) as pack:
        assert pack.read(STATE) == b'{"step": 22}'
    assert sorted(os.listdir(sweep)) == [STATE_BACKUP]  # no temporary file left beside it


def sweep_with_backup(folder, state: bytes, searcher: bytes) -> None:
    """A sweep folder whose backup holds STATE and SEARCHER at step 1; the folder's own files are ``state`` and
    ``searcher`` (a newer snapshot, or torn ones)."""
    folder.mkdir(exist_ok=True)
    with zipfile.ZipFile(folder / STATE_BACKUP, "w") as pack:
        pack.writestr(STATE, json.dumps({"step": 1}))
        pack.writestr(SEARCHER, json.dumps({"searcher": 1}))
    (folder / STATE).write_bytes(state)
    (folder / SEARCHER).write_bytes(searcher)


def test_a_whole_state_is_left_as_it_is(tmp_path):
    """Bug caught: resume replacing a newer whole snapshot with the older backup, which repeats epochs."""
    sweep_with_backup(tmp_path, b'{"step": 2}', b'{"searcher": 2}')
    assert repair_state(str(tmp_path)) == []
    assert (tmp_path / STATE).read_bytes() == b'{"step": 2}' and (tmp_path / SEARCHER).read_bytes() == b'{"searcher": 2}'


def test_a_torn_state_is_replaced_by_the_whole_backup_snapshot(tmp_path):
    """Bugs caught: the CI failure (a 0-byte experiment state, Tune restarted the sweep), and a repair that puts
    back the torn file alone beside a newer searcher state: the two must come from one snapshot."""
    sweep_with_backup(tmp_path, b"", b'{"searcher": 2}')
    assert repair_state(str(tmp_path)) == [STATE]
    assert json.loads((tmp_path / STATE).read_bytes()) == {"step": 1}
    assert json.loads((tmp_path / SEARCHER).read_bytes()) == {"searcher": 1}


def test_a_torn_newer_state_the_backup_lacks_is_moved_aside_for_the_older_whole_one(tmp_path):
    """Bug caught: a resumed sweep killed during its first copy of its own state: Tune takes the newest file by
    name, the torn one. It is kept as .torn (not deleted), and the older run's state is taken."""
    sweep_with_backup(tmp_path, b'{"step": 1}', b'{"searcher": 1}')
    newer = "experiment_state-2026-11-29_08-00-00.json"
    (tmp_path / newer).write_bytes(b'{"trial_da')
    assert repair_state(str(tmp_path)) == [newer]
    assert (tmp_path / f"{newer}.torn").read_bytes() == b'{"trial_da' and not (tmp_path / newer).exists()


def test_a_torn_state_without_any_whole_copy_is_refused_with_what_to_do(tmp_path):
    """Bug caught: resume handing Tune a torn state, which restarts the sweep from nothing (trials without configs)."""
    (tmp_path / STATE).write_bytes(b"")
    with pytest.raises(SweepInputError, match=f"{STATE}.*torn.*new --name"):
        repair_state(str(tmp_path))
    assert (tmp_path / f"{STATE}.torn").exists()


def test_a_damaged_backup_is_ignored_and_a_whole_state_still_resumes(tmp_path):
    """Bug caught: resume ending in a zipfile traceback over a backup damaged after the fact, when the sweep's
    own state is whole and needs no backup."""
    (tmp_path / STATE).write_bytes(b'{"step": 2}')
    (tmp_path / STATE_BACKUP).write_bytes(b"PK not a zip")
    assert repair_state(str(tmp_path)) == [] and (tmp_path / STATE).read_bytes() == b'{"step": 2}'


def test_no_backup_is_written_to_an_object_store(tmp_path):
    """Bug caught: a backup uploaded at every snapshot to a bucket, whose objects are never torn (requests for nothing)."""
    (tmp_path / STATE).write_text('{"step": 1}')
    storage = SimpleNamespace(experiment_driver_staging_path=str(tmp_path), experiment_fs_path="bucket/sweep",
                              storage_filesystem=SimpleNamespace(type_name="s3"))  # any use of it would raise
    StateBackup().on_step_end(iteration=1, trials=[SimpleNamespace(storage=storage)])
