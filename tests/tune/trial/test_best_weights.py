"""A trial's best weights on Ray (tune/trial/trainable.py + tune/trial/checkpoints.py): kept whatever checkpoints remain,
for sweep and confirm trials alike, and they reproduce the recorded best metric."""
from __future__ import annotations

import pyarrow.fs as pafs
import pytest
import torch

from tests.tune.conftest import run_toy_sweep
from tune.driver.options import SweepOptions
from tune.driver.sweep import run_configs
from tune.results.record import outcome
from xbm.config import TrainConfig
from xbm.evaluate import epoch as evaluation
from xbm.trainer import Trainer
# lr 0.05, seed 1 on the toy data: recall_at_1 0.1031, 0.1656 (epoch 2), then 0.1625 at every later epoch,
# so the best epoch is not among the last two of 5 (measured on the CPU, deterministic).
EARLY_PEAK = """
description: a trial whose best epoch comes early
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 5, warmup_epochs: 0, batch_size: 16,
       samples_per_class: 4, val_fraction: 0.2, device: cpu, lr: 0.05, seed: 1}
params:
  normaliser.kind: {grid: [none]}
"""


def selection_recall(payload: dict, model_state: dict) -> float:
    """recall_at_1 on the selection split of ``model_state`` in a fresh Trainer of the payload's config."""
    trainer = Trainer(TrainConfig.from_dict(payload["config"]))
    trainer.model.load_state_dict(model_state)
    split = trainer.splits.val if trainer.splits.val is not None else trainer.splits.test
    return evaluation.evaluate_split(trainer.model, split, trainer.embed, None, trainer.recall_ks,
                                     with_diagnostics=False)["recall_at_1"]


def checkpoint_epochs(trial_folder: str) -> list[str]:
    infos = pafs.LocalFileSystem().get_file_info(pafs.FileSelector(trial_folder))
    return sorted(i.base_name for i in infos if i.base_name.startswith("checkpoint_"))


@pytest.mark.slow
def test_an_early_best_epoch_keeps_its_weights_and_they_reproduce_its_metric(ray_session, tmp_path):
    """Bug caught: the best weights are the last checkpoint's (or are lost with the pruned checkpoints), are
    written at an epoch that did not improve, or are not kept for confirm trials: reloaded, they would not
    give the recorded best recall_at_1 (within 1e-6 on the CPU)."""
    plan, _ = run_toy_sweep(tmp_path, "early", EARLY_PEAK, checkpoint_period=0.0, max_concurrent=1,
                            stop_collapsed=False)  # the fixture peaks early by design: not the guards' business
    trials = outcome(plan.experiment_uri, "recall_at_1", "max").trials
    assert len(trials) == 1
    trial = trials.iloc[0]
    assert trial.status == "completed" and trial.epochs_completed == 5
    assert trial.best_epoch <= 3, f"the fixture must peak before its last two epochs, got {trial.best_epoch}"
    payload = torch.load(trial.best_weights, map_location="cpu", weights_only=True)
    assert payload["epoch"] == trial.best_epoch and payload["metric"] == "recall_at_1"
    assert payload["preprocessing"] is None  # toy vectors: nothing to decode
    folder = trial.best_weights.rsplit("/", 1)[0]
    assert checkpoint_epochs(folder) == ["checkpoint_000004"]  # one full checkpoint left: the last epoch's
    value = selection_recall(payload, payload["model"])
    assert abs(value - trial.best_recall_at_1) <= 1e-6 and abs(payload["value"] - trial.best_recall_at_1) <= 1e-6
    last = torch.load(f"{folder}/checkpoint_000004/trainer.pt", map_location="cpu", weights_only=True)
    assert abs(selection_recall(payload, last["model"]) - trial.final_recall_at_1) <= 1e-6
    assert trial.final_recall_at_1 < trial.best_recall_at_1  # so the last weights would not have passed

    config = {k[len("config."):]: (None if v != v else v) for k, v in trial.items() if k.startswith("config.")}
    after = run_configs([config], SweepOptions(dashboard=False, max_concurrent=1, checkpoint_period=0.0),
                        plan.results_uri).trials
    confirm = after[after.stage == "confirm"].iloc[0]
    kept = torch.load(confirm.best_weights, map_location="cpu", weights_only=True)
    assert kept["epoch"] == confirm.best_epoch and abs(kept["value"] - confirm.best_recall_at_1) <= 1e-6
