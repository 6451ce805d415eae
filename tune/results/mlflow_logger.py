"""``--log mlflow``: Ray's ``MLflowLoggerCallback``, one MLflow run per trial in an MLflow experiment named
after the sweep: the trial's config as params (once, at its start), every reported result as metrics at
step = Tune's training iteration (= the epoch; under PBT/PB2 the values a trial trains with after an explore
are in its ``config/<key>`` metrics, since MLflow refuses to change a logged param).

Steps: Tune's training iteration is the epoch (the trainable reports once per main epoch, and a trial
restored from a checkpoint continues its count).

**Where.** ``MLFLOW_TRACKING_URI`` when set (a tracking server, or any store URI); else a SQLite database in
``<sweep>/mlruns/mlflow.db`` (``sqlite:///...``). MLflow 3 refuses its file store (``./mlruns`` folders of
plain files) unless ``MLFLOW_ALLOW_FILE_STORE=true`` ("maintenance mode"), and points to a database instead;
SQLite needs SQLAlchemy and Alembic, which Optuna already brings. The callback runs on the driver, so a
bucket ``--storage`` needs ``MLFLOW_TRACKING_URI``.
"""
from __future__ import annotations

import os
import time

from ray.air.constants import TRAINING_ITERATION
from ray.air.integrations.mlflow import MLflowLoggerCallback
from ray.tune.result import TIMESTEPS_TOTAL
from ray.tune.utils.util import flatten_dict

from analysis.location import local_path
from tune.errors import SweepInputError

MLRUNS_DIR = "mlruns"
DATABASE = "mlflow.db"
PARAMS_PER_BATCH, METRICS_PER_BATCH = 100, 1000  # MLflow's limits on one log_batch call


def tracking_uri(sweep_dir: str | None) -> str:
    """``MLFLOW_TRACKING_URI``, else the sweep's own SQLite database (``sweep_dir`` None: a bucket storage,
    refused without the variable)."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if sweep_dir is None:
        raise SweepInputError("--log mlflow keeps its runs in a local database (<sweep>/mlruns) unless "
                              "MLFLOW_TRACKING_URI names a tracking server, and --storage is a bucket: set "
                              "MLFLOW_TRACKING_URI, or use a local --storage")
    return f"sqlite:///{os.path.join(sweep_dir, MLRUNS_DIR, DATABASE)}"


class SweepMLflow(MLflowLoggerCallback):
    """Ray's callback, with two changes:

    - each trial's params are logged once: Ray logs them again whenever a trial starts, which PBT and PB2 do
      after every exploit, with the explored values, and MLflow raises on a changed param ("Changing param
      values is not allowed"), inside Tune's driver loop;
    - params and each result go in one ``log_batch`` call: Ray's logs them one value at a time, each with a
      lookup of the run, which on a SQLite store took 1.3-1.8 s per epoch result (~120 values), blocking
      Tune's driver loop. The values and steps are Ray's: every number of the flattened result (``config/<key>``
      included) at step = ``timesteps_total`` or else ``training_iteration``."""

    def __init__(self, uri: str, experiment: str) -> None:
        super().__init__(tracking_uri=uri, experiment_name=experiment)

    def setup(self, *args, **kwargs) -> None:
        if self.tracking_uri.startswith("sqlite:///"):  # SQLite creates the file, not its folder
            os.makedirs(os.path.dirname(self.tracking_uri[len("sqlite:///"):]), exist_ok=True)
        super().setup(*args, **kwargs)

    def log_trial_start(self, trial) -> None:
        from mlflow.entities import Param

        if trial in self._trial_runs:
            return  # a restart (exploit, retry, resumed actor): the run and its params exist
        run = self.mlflow_util.start_run(tags={**self.tags, "trial_name": str(trial)}, run_name=str(trial))
        self._trial_runs[trial] = run.info.run_id
        params = [Param(key, str(value)) for key, value in flatten_dict(trial.config).items()]
        for start in range(0, len(params), PARAMS_PER_BATCH):
            self._client().log_batch(run.info.run_id, params=params[start:start + PARAMS_PER_BATCH])

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        from mlflow.entities import Metric

        step = result.get(TIMESTEPS_TOTAL) or result[TRAINING_ITERATION]
        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, step) for key, value in _numbers(flatten_dict(result)).items()]
        for start in range(0, len(metrics), METRICS_PER_BATCH):
            self._client().log_batch(self._trial_runs[trial], metrics=metrics[start:start + METRICS_PER_BATCH])

    def _client(self):
        return self.mlflow_util._get_client()

    def describe(self) -> str:
        return f"MLflow: experiment {self.experiment_name} at {self.tracking_uri}"

    def closing(self) -> str | None:
        return None


def _numbers(values: dict) -> dict[str, float]:
    """The values that are numbers, as floats (what Ray's callback logs; text and None are left out)."""
    out = {}
    for key, value in values.items():
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            continue
    return out


def build_mlflow(storage_path: str, experiment: str) -> SweepMLflow:
    root = local_path(storage_path)
    local = None if root is None else os.path.join(root, experiment)
    return SweepMLflow(tracking_uri(local), experiment)
