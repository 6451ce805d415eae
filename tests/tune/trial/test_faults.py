"""Faults on the toy trainable: a trial process killed mid-epoch is retried from its checkpoint with
continuous epochs (FailureConfig(max_failures)), a NaN loss ends its trial as failed while the sweep
goes on, and a killed driver followed by ``resume`` finishes the sweep without duplicated or lost rows."""
from __future__ import annotations

import logging
import os
import signal
import threading

import pyarrow.parquet as pq
import pytest
import ray
from ray.tune import Callback

from tune.driver.options import SweepOptions
from tune.driver.plan import prepare
from tune.driver.sweep import resume_sweep, start
from tune.results.record import outcome

BASE = """base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 4, warmup_epochs: 0, batch_size: 32,
       samples_per_class: 4, lr: 1.0e-3}
"""
# weight_decay 1e30 makes the loss NaN in the first epoch (AdamW's decay explodes the weights)
# batch 16: epochs long enough (~200 steps) that the kill below lands inside one on a fast machine too
FAULTS = ("description: faults\n" + BASE.replace("batch_size: 32", "batch_size: 16")
          + "params:\n  weight_decay: {grid: [0.0, 1.0e-4, 1.0e30]}\n")


class KillMidEpoch(Callback):
    """Kill (SIGKILL) the worker process of the trial with ``weight_decay == 0`` shortly after it
    reported epoch 2, i.e. inside epoch 3; record the epochs every trial reported, in order."""

    def __init__(self) -> None:
        self.seen: dict[str, list[int]] = {}
        self.killed = False

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.seen.setdefault(trial.trial_id, []).append(int(result["epoch"]))
        if trial.config["weight_decay"] == 0.0 and result["epoch"] == 2 and not self.killed:
            self.killed = True
            threading.Timer(0.15, os.kill, (int(result["pid"]), signal.SIGKILL)).start()


@pytest.mark.slow
def test_killed_trial_is_retried_from_its_checkpoint_and_nan_fails_alone(ray_session, tmp_path):
    """Bugs caught: a retried trial that starts over or repeats an epoch, a NaN trial that stops the sweep,
    and a retried trial whose time columns miss its first start's set-up (they summed to half its wall time)."""
    (tmp_path / "faults.yaml").write_text(FAULTS)
    plan = prepare(str(tmp_path / "faults.yaml"), SweepOptions(
        search="grid", scheduler="fifo", num_samples=1, max_concurrent=1, max_failures=1, checkpoint_period=0,
        storage=str(tmp_path / "out"), name="faults", dashboard=False, stop_collapsed=False))
    killer = KillMidEpoch()
    start(plan, callbacks=(killer,)).tuner.fit()

    trials = outcome(plan.experiment_uri, "recall_at_1", "max").trials.set_index("config.weight_decay")
    killed, normal, nan = trials.loc[0.0], trials.loc[1e-4], trials.loc[1e30]
    assert killer.killed
    assert killer.seen[killed.trial_id] == [1, 2, 3, 4]  # restored at epoch 2: no epoch repeated or skipped
    assert killed.status == "completed" and killed.retries == 1 and killed.epochs_completed == 4
    assert nan.status == "failed" and nan.stop_reason == "non-finite loss" and nan.retries == 0
    assert nan.error.startswith("NonFiniteLossError: non-finite loss nan at epoch 1")
    assert normal.status == "completed"  # the sweep went on
    epochs = pq.read_table(f"{plan.results_uri}/epochs/{killed.trial_id}.parquet").to_pandas()
    assert epochs["epoch"].tolist() == [1, 2, 3, 4]
    # the restart's set-up adds to the first start's, as wall_time_s does (was: only the restart's, half the wall)
    assert epochs.setup_s[2] > epochs.setup_s[1] > 0
    parts = killed.train_s + killed.eval_s + killed.checkpoint_s + killed.setup_s
    assert abs(parts - killed.wall_time_s) <= 0.1 * killed.wall_time_s, killed[
        ["train_s", "eval_s", "checkpoint_s", "setup_s", "wall_time_s"]].to_dict()


@pytest.mark.slow
def test_killed_driver_then_resume_finishes_the_sweep(ray_session, killed_driver, tmp_path, caplog):
    """Bugs caught: resume losing or repeating rows; and a driver killed while Tune copied its experiment state
    (a file of 0 bytes, seen in CI), after which Tune restarted the sweep and its trial failed without a config:
    resume puts back the last whole snapshot (tune/results/state_backup.py; test_s3.py resumes an intact one)."""
    killed = killed_driver(ray.get_runtime_context().gcs_address, str(tmp_path / "out"))
    torn = killed.tear_state()
    with caplog.at_level(logging.WARNING, logger="tune.driver.sweep"):
        result = resume_sweep(killed.uri, dashboard=False)
    assert f"resume: {torn} torn" in caplog.text
    assert result.exit_code() == 0
    killed.assert_finished_once(result.trials)
