"""Faults on the toy trainable: a trial process killed mid-epoch is retried from its checkpoint with
continuous epochs (FailureConfig(max_failures)), a NaN loss ends its trial as failed while the sweep
goes on, and a killed driver followed by ``resume`` finishes the sweep without duplicated or lost rows."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
import ray
from ray.tune import Callback

from tune.options import SweepOptions
from tune.sweep import outcome, prepare, resume_sweep, start

REPO = Path(__file__).resolve().parents[2]
BASE = """base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 4, warmup_epochs: 0, batch_size: 32,
       samples_per_class: 4, lr: 1.0e-3}
"""
# weight_decay 1e30 makes the loss NaN in the first epoch (AdamW's decay explodes the weights)
# batch 16: epochs long enough (~200 steps) that the kill below lands inside one on a fast machine too
FAULTS = ("description: faults\n" + BASE.replace("batch_size: 32", "batch_size: 16")
          + "params:\n  weight_decay: {grid: [0.0, 1.0e-4, 1.0e30]}\n")
RESUME = "description: resume\n" + BASE + "params:\n  seed: {grid: [0, 1, 2]}\n"


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
    (tmp_path / "faults.yaml").write_text(FAULTS)
    plan = prepare(str(tmp_path / "faults.yaml"), SweepOptions(
        search="grid", scheduler="fifo", num_samples=1, max_concurrent=1, max_failures=1,
        storage=str(tmp_path / "out"), name="faults", dashboard=False))
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


def _sweep_process(tmp_path, address: str) -> subprocess.Popen:
    (tmp_path / "resume.yaml").write_text(RESUME)
    env = {**os.environ, "TUNE_GLOBAL_CHECKPOINT_S": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "tune.cli", "sweep", str(tmp_path / "resume.yaml"), "--search", "grid",
            "--num-samples", "1", "--scheduler", "fifo", "--max-concurrent", "1", "--storage", str(tmp_path / "out"), "--name", "drv",
            "--address", address, "--no-dashboard"]
    log = open(tmp_path / "driver.log", "w")
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


def _wait_for(condition, process, timeout: float, log: Path) -> None:
    deadline = time.time() + timeout
    while not condition():
        if process.poll() is not None or time.time() > deadline:
            process.kill()
            raise AssertionError(f"driver ended or timed out before the kill point:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


@pytest.mark.slow
def test_killed_driver_then_resume_finishes_the_sweep(ray_session, tmp_path):
    driver = _sweep_process(tmp_path, ray.get_runtime_context().gcs_address)
    results = tmp_path / "out" / "drv" / "results"

    def one_done_and_one_halfway() -> bool:
        if not (results / "trials.parquet").is_file():
            return False
        trials = pd.read_parquet(results / "trials.parquet")  # status changes are written at once
        running = trials.trial_id[trials.status == "running"]
        return (trials.status == "completed").sum() >= 1 and any(
            (results / "epochs" / f"{t}.parquet").is_file()
            and pq.read_metadata(results / "epochs" / f"{t}.parquet").num_rows in (2, 3) for t in running)

    # Tune snapshots its state at every checkpoint here (num_to_keep=1), so no wait is needed
    _wait_for(one_done_and_one_halfway, driver, 240, tmp_path / "driver.log")
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    before = pd.read_parquet(results / "trials.parquet").set_index("trial_id")
    finished = before.index[before.status == "completed"][0]
    finished_rows = (results / "epochs" / f"{finished}.parquet").read_bytes()
    halfway = next(t for t in before.index[before.status == "running"]
                   if pq.read_metadata(results / "epochs" / f"{t}.parquet").num_rows >= 2)
    first_epoch = pd.read_parquet(results / "epochs" / f"{halfway}.parquet").iloc[0]

    result = resume_sweep(str(tmp_path / "out" / "drv"), dashboard=False)
    trials = result.trials.set_index("trial_id")
    assert len(trials) == 3 and (trials.status == "completed").all() and result.exit_code() == 0
    assert set(before.index) <= set(trials.index)
    epochs = pq.read_table(results / "epochs").to_pandas()
    assert len(epochs) == 12 and not epochs.duplicated(["trial_id", "epoch"]).any()
    assert sorted(epochs.groupby("trial_id").epoch.apply(list).tolist()) == [[1, 2, 3, 4]] * 3
    assert (results / "epochs" / f"{finished}.parquet").read_bytes() == finished_rows  # not run again
    # the interrupted trial continued from its checkpoint: its first epoch was not trained again
    again = epochs[(epochs.trial_id == halfway) & (epochs.epoch == 1)].iloc[0]
    assert again.epoch_time_s == first_epoch.epoch_time_s and again.loss == first_epoch.loss
