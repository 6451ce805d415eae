"""tune/trial/trainable.py: the config edge, device choice, names, and on Ray: one report per epoch with a
checkpoint that a fresh Trainer continues from, and per-trial seeding on a reused actor."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from ray import tune as ray_tune

from tune.results.trial_config import train_config
from tune.trial.base import assigned_device, worst_value
from tune.trial.trainable import CHECKPOINT_FILE, TrialNamer, make_trainable, trial_dirname

TOY = {"dataset": "toy", "model": "mlp", "embedding_size": 16, "epochs": 2, "warmup_epochs": 0,
       "batch_size": 128, "samples_per_class": 4, "lr": 1e-3}


def test_config_edge_drops_absent_params_and_numpy_scalars():
    cfg = train_config({**TOY, "normaliser.kind": "xbn", "normaliser.lambda_mu": None,
                        "memory.ratio": np.float64(0.25), "evaluate_test": np.False_, "epochs": np.int64(3)})
    assert cfg.normaliser.lambda_mu == 0.5  # absent -> the field's default
    assert cfg.memory.ratio == 0.25 and cfg.evaluate_test is False and cfg.epochs == 3
    with pytest.raises(ValueError, match="unknown config key 'memory.ratoi'"):
        train_config({"memory.ratoi": 0.1})


def test_device_is_the_assigned_gpu_or_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert assigned_device("auto", ["1"]) == "cuda"  # Ray's CUDA_VISIBLE_DEVICES makes it cuda:0
    assert assigned_device("auto", []) == "cpu"  # never a GPU Ray did not assign
    assert assigned_device("cpu", ["0"]) == "cpu"
    # Bug caught: under Ray's NOSET variable the process sees the node's GPUs, and `cuda` put every trial on
    # the first one: the assigned GPU by its place among CUDA_VISIBLE_DEVICES, or its index
    monkeypatch.setenv("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert assigned_device("auto", ["3"]) == "cuda:3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert assigned_device("auto", ["3"]) == "cuda:1"
    monkeypatch.setenv("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", "0")
    assert assigned_device("auto", ["3"]) == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert assigned_device("auto", ["0"]) == "cpu"  # fake GPUs on a CPU machine


def test_names_say_which_trial_and_variant():
    namer = TrialNamer(["normaliser.kind", "normaliser.lambda_mu", "memory.ratio"])
    trial = SimpleNamespace(trial_id="ab12_00003", config={"normaliser.kind": "pcxbn", "normaliser.lambda_mu": 0.31234,
                                                           "memory.ratio": None})
    assert namer(trial) == "ab12_00003_kind=pcxbn,lambda_mu=0.312"
    assert trial_dirname(trial) == "trial_ab12_00003"
    cls = make_trainable("recall_at_1", "max", {"cpu": 2, "gpu": 0.5})
    assert cls.__name__ == "XbmTrial" and repr(cls.__new__(cls)) == "XbmTrial()"  # the Actors view's class
    assert cls.default_resource_request({}).required_resources == {"CPU": 2.0, "GPU": 0.5}
    assert worst_value("max") == -np.inf and worst_value("min") == np.inf


@pytest.mark.slow
def test_reports_each_epoch_with_a_checkpoint_and_seeds_each_trial(ray_session, tmp_path):
    tuner = ray_tune.Tuner(
        make_trainable("recall_at_1", "max"),
        param_space={**TOY, "seed": ray_tune.grid_search([0, 1, 0])},
        tune_config=ray_tune.TuneConfig(metric="recall_at_1", mode="max", max_concurrent_trials=1, reuse_actors=True),
        run_config=ray_tune.RunConfig(storage_path=str(tmp_path), name="t", verbose=0))
    grid = tuner.fit()
    results = [grid[i] for i in range(3)]
    histories = [r.metrics_dataframe for r in results]
    for history in histories:
        assert history["epoch"].tolist() == [1, 2]
        assert {"recall_at_1", "map_at_r", "loss", "node_id"} <= set(history.columns)
    assert len({int(h["pid"].iloc[0]) for h in histories}) == 1  # one actor ran all three (reuse_actors)
    # same seed on a reused actor -> the same run; another seed -> another run
    assert histories[0]["loss"].tolist() == histories[2]["loss"].tolist()
    assert histories[0]["loss"].tolist() != histories[1]["loss"].tolist()

    from xbm.trainer import Trainer

    with results[0].checkpoint.as_directory() as folder:
        state = torch.load(Path(folder) / CHECKPOINT_FILE, map_location="cpu", weights_only=False)
    trainer = Trainer(train_config({**TOY, "seed": 0, "epochs": 3, "device": "cpu"}))
    trainer.load_state_dict(state)
    assert [m["epoch"] for m in trainer.fit()] == [3]  # the checkpoint holds the state after epoch 2
