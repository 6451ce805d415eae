"""tune/commands/refit.py: the dry run's lines and end to end on digits (sweep, refit, trials.parquet's refit rows
with train_classes, export --stage refit); the stage's plan: tests/tune/stages."""
from __future__ import annotations

import pytest

from tests.tune.stages.sweep_rows import ROWS, write_sweep


def test_cli_dry_run_prints_the_runs_and_writes_nothing(tmp_path, capsys):
    from tune.cli import main

    path = write_sweep(tmp_path, ROWS)
    before = sorted(p.name for p in (tmp_path / "sweep").rglob("*"))
    assert main(["refit", path, "--best", "--seeds", "2", "--classes", "all", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "refitting trial b" in out and "on all classes x 2 seed(s) [1, 2], 2 epochs" in out
    assert "test metrics are not available" in out
    assert sorted(p.name for p in (tmp_path / "sweep").rglob("*")) == before
    assert main(["refit", path, "--best", "--seeds", "0"]) == 2


DIGITS_SPACE = """
description: refit end to end (digits, 5 training classes of which 1 validates)
base: {dataset: digits, model: mlp, embedding_size: 16, image_size: 8, epochs: 1, warmup_epochs: 0, batch_size: 16,
       samples_per_class: 4, val_fraction: 0.2, device: cpu, normaliser.kind: none}
params:
  lr: {loguniform: [1.0e-4, 1.0e-3]}
"""


@pytest.mark.slow
def test_refit_end_to_end_on_digits(ray_session, tmp_path):
    """Bug: the refit stage's rows missing from trials.parquet, without train_classes (every stage), still holding
    out the validation classes, or not exportable with export --stage refit."""
    import pandas as pd
    from tune.cli import main

    space = tmp_path / "digits.yaml"
    space.write_text(DIGITS_SPACE)
    assert main(["sweep", str(space), "--num-samples", "1", "--search", "random", "--scheduler", "fifo",
                 "--no-dashboard", "--storage", str(tmp_path), "--name", "s", "--seed", "0",
                 "--max-concurrent", "1"]) == 0
    sweep = tmp_path / "s"
    assert main(["refit", str(sweep), "--best", "--seeds", "1", "--no-dashboard", "--max-concurrent", "1"]) == 0
    trials = pd.read_parquet(sweep / "results" / "trials.parquet")
    swept, refit = trials[trials["stage"] == "sweep"], trials[trials["stage"] == "refit"]
    assert len(swept) == 1 and len(refit) == 1 and (refit["status"] == "completed").all()
    assert list(swept["train_classes"]) == [4] and list(refit["train_classes"]) == [5]  # digits 0-4, 1 validates
    assert list(refit["config.train_on"]) == ["train+val"] and list(refit["seed"]) == [1]
    assert refit["config.lr"].iloc[0] == swept["config.lr"].iloc[0]
    epochs = pd.read_parquet(sweep / "results" / "epochs" / f"{refit['trial_id'].iloc[0]}.parquet")
    assert list(epochs["eval_split"]) == ["test"] and epochs["train_classes"].tolist() == [5]
    assert main(["export", str(sweep), "--stage", "refit", "--best", "--out", str(tmp_path / "e")]) == 0
    assert "stage: refit" in (tmp_path / "e" / "embedder.yaml").read_text()
