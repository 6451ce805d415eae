"""``--log mlflow``: the store it writes to, each trial a run with its params once and every result at its
step, read back with MLflow's own client."""
from __future__ import annotations

import pytest

from tune.errors import SweepInputError
from tune.results.mlflow_logger import SweepMLflow, build_mlflow, tracking_uri


class FakeTrial:
    """What the callback reads of a Tune trial: its name and config (a stand-in: no Ray needed)."""

    def __init__(self, name: str, config: dict) -> None:
        self.name, self.config = name, config

    def __str__(self) -> str:
        return self.name


def test_the_store_is_the_sweeps_database_unless_a_tracking_uri_is_set(monkeypatch):
    """Bugs caught: runs written to MLflow's default ./mlruns (wherever the CLI was started; MLflow 3 also
    refuses that file store), MLFLOW_TRACKING_URI ignored, or a bucket storage given a local database path."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_uri("/data/sweeps/exp") == "sqlite:////data/sweeps/exp/mlruns/mlflow.db"
    assert build_mlflow("/data/sweeps", "exp").tracking_uri == "sqlite:////data/sweeps/exp/mlruns/mlflow.db"
    assert build_mlflow("file:///data/sweeps", "exp").tracking_uri == "sqlite:////data/sweeps/exp/mlruns/mlflow.db"
    with pytest.raises(SweepInputError, match="MLFLOW_TRACKING_URI"):
        build_mlflow("s3://bucket/sweeps", "exp")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example.org:5000")
    assert build_mlflow("s3://bucket/sweeps", "exp").tracking_uri == "http://mlflow.example.org:5000"


def test_a_trial_is_one_run_with_its_params_once_and_every_result_at_its_epoch(tmp_path):
    """Bugs caught: a PBT exploit (the trial starts again with changed params) raising MLflow's 'Changing param
    values is not allowed' and ending the sweep, or opening a second run; results logged at the wrong step;
    the explored value lost (it must show in the config/<key> metric)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/exp/mlruns/mlflow.db"
    callback = SweepMLflow(uri, "exp")
    callback.setup()
    trial = FakeTrial("t_00000", {"lr": 1e-3, "normaliser.kind": "pcxbn", "memory.ratio": None})
    callback.log_trial_start(trial)
    callback.log_trial_result(1, trial, {"training_iteration": 1, "epoch": 1, "recall_at_1": 0.25,
                                         "eval_split": "val", "config": dict(trial.config)})
    trial.config = {**trial.config, "lr": 2e-3}  # explored at the exploit
    callback.log_trial_start(trial)
    callback.log_trial_result(2, trial, {"training_iteration": 2, "epoch": 2, "recall_at_1": 0.5,
                                         "eval_split": "val", "config": dict(trial.config)})
    callback.log_trial_end(trial)

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert [r.info.run_name for r in runs] == ["t_00000"] and runs[0].info.status == "FINISHED"
    assert runs[0].data.params == {"lr": "0.001", "normaliser.kind": "pcxbn", "memory.ratio": "None"}
    history = lambda key: [(m.step, m.value) for m in client.get_metric_history(runs[0].info.run_id, key)]
    assert history("recall_at_1") == [(1, 0.25), (2, 0.5)] and history("epoch") == [(1, 1.0), (2, 2.0)]
    assert history("config/lr") == [(1, 1e-3), (2, 2e-3)]
    assert "eval_split" not in runs[0].data.metrics  # text is not a metric
