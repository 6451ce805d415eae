"""A trial's epoch loop (tune.trial.loop) without Ray: what each row says about the best weights when it is
reported, and what a full checkpoint's trial state names."""
from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tune.trial.checkpoints import TRIAL_STATE
from xbm.training.best_weights import BEST_WEIGHTS, BestWeights
from analysis.location import Folder
from tune.trial.base import TrialPolicy
from tune.trial.loop import Reporter, TrialLoop


class SlowStorage(Folder):
    def write_bytes(self, relative, payload):
        time.sleep(0.3)
        super().write_bytes(relative, payload)


class EpochsTrainer:
    """Three epochs whose metric improves every time."""

    model = torch.nn.Linear(2, 1)

    def fit(self):
        for epoch in (1, 2, 3):
            yield {"epoch": epoch, "recall_at_1": 0.1 * epoch, "epoch_time_s": 1.0}

    def state_dict(self):
        return {"model": self.model.state_dict()}

    def preprocessing_dict(self):
        return None


@pytest.mark.parametrize("before_report", [False, True])
def test_the_best_weights_on_storage_are_the_epoch_the_rows_say(tmp_path, before_report):
    """Bugs caught: a full checkpoint whose trial state names epoch k as the best while the write of epoch k's
    weights is still running (killed there, the resumed trial keeps epoch k's value as the best to beat and
    never rewrites the older file); a data-parallel rank 0 reporting an epoch's best weights that Tune's stop
    (which kills rank 0) leaves unwritten."""
    seen = []

    def send(row, checkpoint=None):
        path = tmp_path / "trial" / BEST_WEIGHTS
        on_disk = torch.load(path, weights_only=True)["epoch"] if path.exists() else None
        state = json.loads(Path(checkpoint, TRIAL_STATE).read_text())["best"]["epoch"] if checkpoint else None
        seen.append((row["epoch"], on_disk, state))

    best = BestWeights(SlowStorage(str(tmp_path / "trial")), str(tmp_path / "trial"), "max")
    cfg = SimpleNamespace(epochs=3, to_dict=dict, train_on="train")
    loop = TrialLoop("t1", cfg, "recall_at_1", "max", TrialPolicy(checkpoint_period_s=2.0), None, {}, best,
                     Reporter(send, lambda folder: folder), time.perf_counter(), best_before_report=before_report)
    loop.run(EpochsTrainer())
    best.wait()
    # epoch 2: a full checkpoint (2 s of epochs); epoch 3: the last
    assert [(epoch, state) for epoch, _, state in seen] == [(1, None), (2, 2), (3, 3)]
    assert [on_disk for _, on_disk, state in seen if state is not None] == [2, 3]
    if before_report:
        assert [on_disk for _, on_disk, _ in seen] == [1, 2, 3]


class FallingTrainer(EpochsTrainer):
    """Three epochs whose metric falls: a sweep trial would keep epoch 1."""

    def fit(self):
        for epoch in (1, 2, 3):
            yield {"epoch": epoch, "recall_at_1": 0.4 - 0.1 * epoch, "epoch_time_s": 1.0}


def test_a_refit_keeps_its_last_epoch_not_the_best_on_the_test_classes(tmp_path):
    """Bug: a refit (train_on=train+val: no validation classes, its metric measured on the test classes) kept the
    epoch with the best test value: its product, and the values reported for it, selected on the test set."""
    best = BestWeights(Folder(str(tmp_path / "trial")), str(tmp_path / "trial"), "max")
    cfg = SimpleNamespace(epochs=3, to_dict=dict, train_on="train+val")
    loop = TrialLoop("t1", cfg, "recall_at_1", "max", TrialPolicy(checkpoint_period_s=100.0), None, {}, best,
                     Reporter(lambda row, checkpoint=None: None, lambda folder: folder), time.perf_counter())
    loop.run(FallingTrainer())
    best.wait()
    assert torch.load(tmp_path / "trial" / BEST_WEIGHTS, weights_only=True)["epoch"] == 3 and best.epoch == 3
