"""A trial's checkpoint policy and deterministic failures on Ray (tune.trial.trainable + tune.trial.checkpoints): how
many full checkpoints a trial writes and keeps, its best weights, and an out-of-memory error not retried."""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from ray import tune as ray_tune
from ray.tune import Callback

from tune.trial.checkpoints import KeepLatestCheckpoint
from xbm.training.best_weights import BEST_WEIGHTS
from tune.results.sink import ParquetSink
from tune.trial.base import CONFIG_REFUSED, TrialPolicy
from tune.trial.trainable import make_trainable, run_trial

TOY = {"dataset": "toy", "model": "mlp", "embedding_size": 16, "epochs": 3, "warmup_epochs": 0,
       "batch_size": 128, "samples_per_class": 4, "lr": 1e-3, "device": "cpu"}


class CountCheckpoints(Callback):
    def __init__(self) -> None:
        self.written: dict[str, int] = {}

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        self.written[trial.trial_id] = self.written.get(trial.trial_id, 0) + 1


def _fit(tmp_path, name, trainable, callbacks=(), max_failures=0, seeds=(0, 1)):
    sink = ParquetSink(str(tmp_path / name / "results"), name, "recall_at_1", "max")
    tuner = ray_tune.Tuner(trainable, param_space={**TOY, "seed": ray_tune.grid_search(list(seeds))},
                       tune_config=ray_tune.TuneConfig(metric="recall_at_1", mode="max", max_concurrent_trials=1),
                       run_config=ray_tune.RunConfig(storage_path=str(tmp_path), name=name, verbose=0,
                                                 callbacks=[sink, *callbacks],
                                                 failure_config=ray_tune.FailureConfig(max_failures=max_failures),
                                                 checkpoint_config=ray_tune.CheckpointConfig(num_to_keep=2)))
    grid = tuner.fit()
    trials = pq.read_table(tmp_path / name / "results" / "trials.parquet").to_pandas()
    return grid, trials


@pytest.mark.slow
def test_checkpoints_follow_the_period_and_a_finished_trial_keeps_one_and_its_best_weights(ray_session, tmp_path):
    """Bugs caught: a full checkpoint every epoch whatever --checkpoint-period (the fixed cost not cut), none at
    the last epoch, a finished trial keeping two (num_to_keep) or none, and the best epoch's weights lost when
    it came before the last checkpoint."""
    rare, every = CountCheckpoints(), CountCheckpoints()
    _fit(tmp_path, "rare", make_trainable("recall_at_1", "max", policy=TrialPolicy(checkpoint_period_s=1e9)),
         (rare,))
    assert sorted(rare.written.values()) == [1, 1]  # the last epoch's only
    grid, trials = _fit(tmp_path, "every", make_trainable("recall_at_1", "max", policy=TrialPolicy(0.0)),
                        (every, KeepLatestCheckpoint()))
    assert sorted(every.written.values()) == [3, 3]
    for result in grid:
        folder = Path(result.path)
        assert sorted(p.name for p in folder.glob("checkpoint_*")) == ["checkpoint_000002"]
        history = result.metrics_dataframe
        best_epoch = int(history.loc[history["recall_at_1"].idxmax(), "epoch"])
        saved = torch.load(folder / BEST_WEIGHTS, weights_only=True)
        assert saved["epoch"] == best_epoch and saved["value"] == history["recall_at_1"].max()
        assert saved["config"]["seed"] == result.config["seed"] and "head.weight" in "".join(saved["model"])
        assert history["best_weights"].iloc[-1] == str(folder / BEST_WEIGHTS)
        assert (history["setup_s"] > 0).all() and (history["checkpoint_s"] >= 0).all()


def failing_trial(config, fail_with):
    """run_trial whose training step raises the error named by ``fail_with`` (patched inside the trial's own
    process)."""
    import xbm.trainer.run
    from xbm.errors import BadImageError, SharedMemoryError

    errors = {"oom": torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
              "bad_image": BadImageError("data set 'cub': cannot decode image /data/cub/1.jpg (data_root /data/cub)"),
              "shm": SharedMemoryError("loader workers hand their batches over in shared memory (/dev/shm), but ...")}

    def fail(*args, **kwargs):
        raise errors[fail_with]

    xbm.trainer.run.run_epoch = fail
    run_trial(config, "recall_at_1", "max")


@pytest.mark.slow
@pytest.mark.parametrize("fail_with, reason, error", [
    ("oom", "batch_size=128", "OutOfMemoryError: CUDA out of memory"),
    ("bad_image", "bad image (on_bad_image=stop)", "BadImageError: data set 'cub': cannot decode image /data/cub/1.jpg"),
    ("shm", "shared memory too small", "SharedMemoryError: loader workers hand their batches over in shared memory"),
])
def test_a_deterministic_error_fails_the_trial_at_once_with_what_to_change(ray_session, tmp_path, fail_with,
                                                                          reason, error):
    """Bug caught: an out-of-memory error, a bad image or workers that cannot fit /dev/shm retried max_failures
    times into the same failure
    (each retry re-runs the set-up), or recorded without the batch size and what to change."""
    trainable = ray_tune.with_parameters(failing_trial, fail_with=fail_with)
    sink = ParquetSink(str(tmp_path / "f" / "results"), "f", "recall_at_1", "max")
    ray_tune.Tuner(trainable, param_space=TOY,
               tune_config=ray_tune.TuneConfig(metric="recall_at_1", mode="max"),
               run_config=ray_tune.RunConfig(storage_path=str(tmp_path), name="f", verbose=0, callbacks=[sink],
                                         failure_config=ray_tune.FailureConfig(max_failures=2))).fit()
    row = pq.read_table(tmp_path / "f" / "results" / "trials.parquet").to_pandas().iloc[0]
    assert row["status"] == "failed" and row["retries"] == 0
    assert reason in row["stop_reason"] and row["error"].startswith(error)
    if fail_with == "oom":
        assert "--gpus-per-trial" in row["stop_reason"]


@pytest.mark.slow
def test_a_refused_config_fails_its_trial_at_once_and_the_sweep_goes_on(ray_session, tmp_path):
    """Bugs caught: a config the trainer refuses (Ray's PBT once explored lambda_mu to 1.17) stopping the whole
    sweep, the sink's callback raising on it, or retried max_failures times into the same refusal; its row
    losing the value that was refused."""
    trainable = ray_tune.with_parameters(run_trial, metric="recall_at_1", mode="max")
    sink = ParquetSink(str(tmp_path / "r" / "results"), "r", "recall_at_1", "max")
    ray_tune.Tuner(trainable, param_space={**TOY, "epochs": 1, "normaliser.kind": "pcxbn",
                                           "normaliser.lambda_mu": ray_tune.grid_search([0.5, 1.17])},
                   tune_config=ray_tune.TuneConfig(metric="recall_at_1", mode="max", max_concurrent_trials=1),
                   run_config=ray_tune.RunConfig(storage_path=str(tmp_path), name="r", verbose=0, callbacks=[sink],
                                                 failure_config=ray_tune.FailureConfig(max_failures=2))).fit()
    rows = pq.read_table(tmp_path / "r" / "results" / "trials.parquet").to_pandas()
    rows = rows.set_index("config.normaliser.lambda_mu")
    assert rows.loc[0.5, "status"] == "completed"
    assert rows.loc[1.17, "status"] == "failed" and rows.loc[1.17, "retries"] == 0
    assert rows.loc[1.17, "stop_reason"] == CONFIG_REFUSED
    assert rows.loc[1.17, "error"] == "ValueError: normaliser.lambda_mu must satisfy 0 <= lambda_mu <= 1, but got 1.17"
