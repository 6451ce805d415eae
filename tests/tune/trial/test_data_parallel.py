"""tune/trial/data_parallel.py end to end on the CPU (gloo): a sweep whose trials are 2-worker Ray Train runs, under
ASHA, is one trial per row in Parquet, and its trial with a NaN loss fails once; a 2-worker trial whose launcher
is killed resumes exactly from its Tune checkpoint. Ray gets 8 logical CPUs on this 2-core machine
(oversubscribed on purpose: each trial is a launcher of 0.01 CPU and 2 one-CPU workers; a killed launcher's Train
placement group can outlive it here, where several Ray instances share the machine and Train's clean-up cannot
reach its state API). A trial whose config the trainer refuses ends before its Train run (on a stand-in of
Tune's context, no Ray)."""
from __future__ import annotations

import math
import os
import signal
import threading
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest
import ray
from ray.tune import Callback

from tune.driver.options import SweepOptions
from tune.driver.plan import prepare
from tune.driver.sweep import start
from tune.results.record import outcome
from tune.trial import data_parallel
from tune.trial.base import CONFIG_REFUSED, TrialPolicy

SPACE = """description: data-parallel
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 3, warmup_epochs: 0, batch_size: 16,
       samples_per_class: 4, val_fraction: 0.2, device: cpu}
params:
  lr: {grid: [1.0e-4, 1.0e-3, 1.0e-2]}
"""
# one config twice (--num-samples 2 repeats the grid): the killed trial and its untouched twin
TWINS = SPACE.replace("epochs: 3", "epochs: 4").replace("[1.0e-4, 1.0e-3, 1.0e-2]", "[1.0e-3]")


@pytest.fixture(scope="module")
def eight_cpus():
    ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def run_sweep(root, name: str, space: str, watch: Callback, **options):
    """``space``'s sweep under ``root`` with ``watch`` among Tune's callbacks, to the end; its plan."""
    (root / "space.yaml").write_text(space)
    plan = prepare(str(root / "space.yaml"), SweepOptions(storage=str(root / "sweeps"), name=name, dashboard=False,
                                                          **options))
    start(plan, callbacks=(watch,)).tuner.fit()
    return plan


class Epochs(Callback):
    """The epochs each trial reported, in order, and the trials RUNNING at once (most); with ``kill``, SIGKILL
    the launcher of the first trial to report epoch 2 (inside its epoch 3)."""

    def __init__(self, kill: bool = False) -> None:
        self.seen: dict[str, list[int]] = {}
        self.kill, self.killed, self.most = kill, None, 0

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.seen.setdefault(trial.trial_id, []).append(int(result["epoch"]))
        self.most = max(self.most, sum(t.status == "RUNNING" for t in trials))
        if self.kill and self.killed is None and result["epoch"] == 2:
            self.killed = trial.trial_id
            threading.Timer(0.15, os.kill, (int(result["pid"]), signal.SIGKILL)).start()


@pytest.mark.slow
def test_a_two_worker_sweep_under_asha_is_one_row_per_trial_and_a_nan_fails_without_a_retry(eight_cpus, tmp_path):
    """Bugs caught (issue 20): a multi-worker trial written as one row per worker, or without ``workers`` /
    ``config.workers``; its GPU hours counted from the launcher's placement group; Tune starting more trials
    than ``--max-concurrent`` allows (Train runs then wait on each other); the Train run's own checkpoint copies
    left in the trial's folder. And a deterministic worker error (a non-finite loss here; out-of-memory and a bad
    image take the same path, ``deterministic_failure``) that Ray Train wraps per rank, unwrapped nowhere: Tune
    then retries the 2-worker trial into the same failure, and its row has no ``stop_reason`` or ``error``.
    One sweep for both: each 2-worker trial starts a launcher, 2 workers and Train's helper actors."""
    watch = Epochs()
    space = SPACE.replace("lr: {grid: [1.0e-4, 1.0e-3, 1.0e-2]}", "weight_decay: {grid: [1.0e-4, 1.0e30]}")
    plan = run_sweep(tmp_path, "dp", space, watch, search="grid", num_samples=1, scheduler="asha",
                     workers_per_trial=2, cpus_per_trial=1.0, checkpoint_period=0, stop_collapsed=False,
                     max_concurrent=1, max_failures=1)
    assert plan.options.max_concurrent == 1 and watch.most == 1  # the cap holds for grid search
    trials = outcome(plan.experiment_uri, "recall_at_1", "max").trials.set_index("config.weight_decay")
    assert len(trials) == 2 and (trials.workers == 2).all() and (trials["config.workers"] == 2).all()
    nan = trials.loc[1.0e30]
    assert nan.status == "failed" and nan.stop_reason == "non-finite loss" and nan.retries == 0
    assert nan.error.startswith("NonFiniteLossError: non-finite loss nan at epoch 1")
    trial = trials.loc[1.0e-4]
    assert trial.status in {"completed", "stopped_early"} and trial.retries == 0
    assert trial.wall_time_s > 0 and trial.gpu_hours == 0.0  # CPU workers: 2 x 0 GPUs
    assert trial.setup_s > 0 and isinstance(trial.best_weights, str)
    epochs = pq.read_table(f"{plan.results_uri}/epochs").to_pandas()
    rows = epochs[epochs.trial_id == trial.trial_id].sort_values("epoch")
    assert rows.epoch.tolist() == list(range(1, trial.epochs_completed + 1)) == watch.seen[trial.trial_id]
    assert np.isfinite(rows.loss).all() and np.isfinite(rows.recall_at_1).all()  # rank 0's evaluation
    folder = f"{plan.experiment_uri}/trial_{trial.trial_id}"
    assert not os.path.exists(f"{folder}/data_parallel")  # Train's copies deleted, Tune's kept
    assert any(name.startswith("checkpoint_") for name in os.listdir(folder))


@pytest.mark.slow
def test_a_killed_two_worker_trial_resumes_exactly_from_its_checkpoint(eight_cpus, tmp_path):
    """Bug caught (issue 20): a data-parallel trial restarted from scratch after its launcher died (Tune's
    checkpoint not handed to the workers), resumed from Train's own checkpoint instead of Tune's, or resumed
    inexactly (a rank's memory, sampler or RNG state not restored: epochs 3 and 4 then differ from the
    untouched twin's)."""
    watch = Epochs(kill=True)
    plan = run_sweep(tmp_path, "dp-resume", TWINS, watch, search="grid", num_samples=2, scheduler="fifo",
                     max_concurrent=1, max_failures=1, workers_per_trial=2, cpus_per_trial=1.0,
                     checkpoint_period=0, stop_collapsed=False)
    trials = outcome(plan.experiment_uri, "recall_at_1", "max").trials.set_index("trial_id")
    killed = watch.killed
    (twin,) = [t for t in trials.index if t != killed]
    assert watch.seen[killed] == [1, 2, 3, 4]  # restored at epoch 2: none repeated or skipped
    assert trials.loc[killed, "retries"] == 1 and trials.loc[twin, "retries"] == 0
    assert (trials.status == "completed").all() and (trials.workers == 2).all()
    epochs = pq.read_table(f"{plan.results_uri}/epochs").to_pandas().sort_values("epoch")
    after, same = epochs[epochs.trial_id == killed], epochs[epochs.trial_id == twin]
    for column in ("loss", "recall_at_1", "memory_fill", "drift_mean"):
        np.testing.assert_array_equal(after[column].to_numpy(), same[column].to_numpy(), err_msg=column)


def test_a_refused_config_ends_the_two_worker_trial_before_its_train_run_starts(monkeypatch):
    """Bug caught: a data-parallel trial of a config the trainer refuses setting up its Train run (each worker
    refusing it in turn, then the trial retried max_failures times) instead of reporting one error row."""
    reported = []
    context = SimpleNamespace(get_trial_id=lambda: "t1", get_trial_name=lambda: "t1_name",
                              get_storage=lambda: pytest.fail("the trial set up its Train run"))
    monkeypatch.setattr(data_parallel, "ray_tune", SimpleNamespace(get_context=lambda: context,
                                                                   report=reported.append))
    config = {"dataset": "toy", "model": "mlp", "normaliser.kind": "pcxbn", "normaliser.lambda_mu": 1.17}
    data_parallel.run_parallel_trial(config, "recall_at_1", "max", None, None, TrialPolicy(), 2, {"CPU": 1.0})
    assert len(reported) == 1 and reported[0]["stop_reason"] == CONFIG_REFUSED
    assert reported[0]["recall_at_1"] == -math.inf and "lambda_mu <= 1" in reported[0]["error"]
