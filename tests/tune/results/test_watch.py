"""Watching a real sweep (optuna + ASHA, one trial at a time so one actor runs them all): the actor's
stdout lines (tune/results/live.py, tune/trial/trainable.py), the TensorBoard runs (tune/results/tensorboard_logger.py) and the
Optuna study (tune/search/optuna_study.py, live and exported), each checked against the sweep's Parquet."""
from __future__ import annotations

import glob
import os
import re

import optuna
import pyarrow.parquet as pq
import pytest
from optuna.trial import TrialState

from tune.search.optuna_study import export_optuna, journal_storage

from ..conftest import run_toy_sweep

SPACE = """description: watched toy sweep
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 3, warmup_epochs: 0, batch_size: 128,
       samples_per_class: 4, lr: 1.0e-3, device: cpu}
params:
  normaliser.kind: {choice: [none, xbn, pcxbn]}
  normaliser.lambda_mu: {uniform: [0.0, 1.0], when: {normaliser.kind: pcxbn}}
  memory.ratio: {uniform: [0.1, 1.0]}
"""
LINE = re.compile(r"\[xbm\] trial (\S+) epoch (\d+)/3 loss=(\S+) recall_at_1=(\S+) \| "
                  r"sweep best recall_at_1=(\S+) \(trial (\S+), epoch (\d+)\)")
HEADER = re.compile(r"\[xbm\] trial (\S+) starts \(trial (\d+) on this actor\): (\S+) config \{")


@pytest.fixture(scope="module")
def watched(ray_session, tmp_path_factory):
    """The sweep, its trials/epochs tables, and its actors' stdout (what the dashboard's logs show)."""
    import ray

    plan, _ = run_toy_sweep(tmp_path_factory.mktemp("watch"), "watched", SPACE, num_samples=5, grace_period=1,
                            reduction_factor=2, max_concurrent=1, seed=3)
    trials = pq.read_table(f"{plan.results_uri}/trials.parquet").to_pandas()
    epochs = pq.read_table(f"{plan.results_uri}/epochs").to_pandas()
    logs = ray._private.worker._global_node.get_logs_dir_path()
    stdout = [open(f).read() for f in glob.glob(os.path.join(logs, "worker-*.out"))]
    # this sweep's actors only: the Ray is shared with the modules before this one (tests/tune/conftest.py)
    ours = tuple(f"[xbm] trial {trial_id} " for trial_id in trials.trial_id)
    return plan, trials, epochs, [text for text in stdout if any(mark in text for mark in ours)]


@pytest.mark.slow
def test_each_epoch_prints_one_line_with_loss_metric_and_the_sweep_best(watched):
    """Bugs caught: a missing or doubled epoch line; loss or metric not the reported values; the sweep's
    best lagging more than the epoch being printed (the driver publishes before the next epoch runs) or
    counting a trial that had not run yet."""
    _, trials, epochs, stdout = watched
    assert len(stdout) == 1  # one actor ran every trial
    lines = [m.groups() for m in LINE.finditer(stdout[0])]
    assert len(lines) == len(epochs) == trials.epochs_completed.sum()
    rows = epochs.set_index(["trial_id", "epoch"])
    running_best = None  # trials ran one at a time, in the order of their lines
    for trial_id, epoch, loss, value, best, best_trial, best_epoch in lines:
        row = rows.loc[(trial_id, int(epoch))]
        assert loss == f"{row.loss:.4g}" and value == f"{row.recall_at_1:.4g}"
        if running_best is None or row.recall_at_1 > running_best[0]:
            running_best = (row.recall_at_1, trial_id, int(epoch))
        assert (best, best_trial, int(best_epoch)) == (f"{running_best[0]:.4g}", running_best[1], running_best[2])


@pytest.mark.slow
def test_a_reused_actor_announces_each_new_trial_and_renames_its_log_prefix(watched):
    """Bugs caught: no header when a reused actor takes a trial; the log prefix (Ray's ``:actor_name:``
    marker) still naming the actor's first trial, as the Actors table does."""
    _, trials, _, (text,) = watched
    names = dict(zip(trials.trial_id, trials.trial_name))
    headers = [m.groups() for m in HEADER.finditer(text)]
    assert [h[0] for h in headers] == list(dict.fromkeys(m.group(1) for m in LINE.finditer(text)))
    assert len(headers) == len(trials) and [int(h[1]) for h in headers] == list(range(1, len(trials) + 1))
    for trial_id, _, name in headers:
        assert name == names[trial_id]
        marker = text.index(f":actor_name:XbmTrial({name})")  # the prefix switches before the header
        assert marker < text.index(f"[xbm] trial {trial_id} starts")


@pytest.mark.slow
def test_tensorboard_has_one_run_per_trial_named_after_it_with_the_metric_tags(watched):
    """Bugs caught: runs named after folders instead of trials; tags missing a trainer metric; scalars
    that are not the epochs' values (wrong step or value)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    plan, trials, epochs, _ = watched
    folder = os.path.join(plan.experiment_uri, "tensorboard")
    assert sorted(os.listdir(folder)) == sorted(trials.trial_name)
    for trial_id, name in zip(trials.trial_id, trials.trial_name):
        events = EventAccumulator(os.path.join(folder, name))
        events.Reload()
        tags = events.Tags()["scalars"]
        assert {"ray/tune/recall_at_1", "ray/tune/loss", "ray/tune/map_at_r", "ray/tune/epoch"} <= set(tags)
        mine = epochs[epochs.trial_id == trial_id].sort_values("epoch")
        recall = events.Scalars("ray/tune/recall_at_1")
        assert [e.step for e in recall] == list(mine.epoch)
        assert [e.value for e in recall] == pytest.approx(list(mine.recall_at_1), rel=1e-6)


def _study(path: str, name: str) -> dict:
    study = optuna.load_study(study_name=name, storage=journal_storage(path))
    return {t.user_attrs["ray_trial_id"]: t for t in study.trials}


@pytest.mark.slow
def test_live_optuna_study_matches_the_parquet(watched):
    """Bugs caught: the study not persisted, or under another name; pruned/completed counts that differ
    from trials.parquet's stopped_early/completed; a curve missing its last epoch; params not the trial's."""
    plan, trials, epochs, _ = watched
    study = _study(plan.optuna_journal, "watched")
    assert set(study) == set(trials.trial_id)
    assert optuna.load_study(study_name="watched", storage=journal_storage(plan.optuna_journal)).metric_names == [
        "recall_at_1"]
    states = [t.state for t in study.values()]
    assert states.count(TrialState.PRUNED) == (trials.status == "stopped_early").sum() >= 1
    assert states.count(TrialState.COMPLETE) == (trials.status == "completed").sum() >= 1
    for row in trials.to_dict("records"):
        trial = study[row["trial_id"]]
        curve = epochs[epochs.trial_id == row["trial_id"]].sort_values("epoch")
        assert trial.intermediate_values == dict(zip(curve.epoch, curve.recall_at_1))
        assert trial.params["normaliser.kind"] == row["config.normaliser.kind"]
        assert trial.params["memory.ratio"] == row["config.memory.ratio"]
        if trial.state == TrialState.COMPLETE:
            assert trial.value == pytest.approx(row["final_recall_at_1"])


@pytest.mark.slow
def test_export_from_parquet_rebuilds_the_live_study(watched, tmp_path):
    """Bugs caught: the export maps statuses to the wrong states, loses params, values or curves, or
    overwrites a study that already exists."""
    plan, _, _, _ = watched
    out, name, counts = export_optuna(plan.experiment_uri, str(tmp_path / "exported.journal"))
    live, exported = _study(plan.optuna_journal, "watched"), _study(out, name)
    assert name == "watched" and set(exported) == set(live)
    assert sum(counts.values()) == len(live)
    for trial_id, trial in live.items():
        twin = exported[trial_id]
        assert (twin.state, twin.value, twin.params, twin.intermediate_values) == (
            trial.state, trial.value, trial.params, trial.intermediate_values)
    with pytest.raises(ValueError, match="already holds a study named 'watched'"):
        export_optuna(plan.experiment_uri)  # the live journal is there
