"""tune/commands/confirm.py: the dry run's lines and end to end on the toy (the stage's plan: tests/tune/stages)."""
from __future__ import annotations

import pytest

from tests.tune.stages.sweep_rows import ROWS, write_sweep


def test_cli_dry_run_prints_the_selection_and_writes_nothing(tmp_path, capsys):
    from tune.cli import main

    path = write_sweep(tmp_path, ROWS)
    before = sorted(p.name for p in (tmp_path / "sweep").rglob("*"))
    assert main(["confirm", path, "--top", "2", "--seeds", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "confirming 2 configuration(s) x 2 seed(s) [1, 2] = 4 run(s)" in out and "#1 b" in out
    assert "normaliser.kind=pcxbn, normaliser.lambda_mu=0.3, memory.ratio=0.5" in out
    assert sorted(p.name for p in (tmp_path / "sweep").rglob("*")) == before
    assert main(["confirm", path, "--top", "0"]) == 2


@pytest.mark.slow
def test_confirm_end_to_end_on_the_toy_trainable(ray_session, toy_space, tmp_path):
    import pandas as pd
    from tune.cli import main

    # one trial at a time: each stage then starts one actor (imports dominate on 2 cores)
    assert main(["sweep", str(toy_space), "--num-samples", "2", "--search", "random", "--scheduler", "fifo",
                 "--no-dashboard", "--storage", str(tmp_path), "--name", "s", "--seed", "0",
                 "--max-concurrent", "1"]) == 0
    sweep = tmp_path / "s"
    assert main(["confirm", str(sweep), "--top", "1", "--seeds", "2", "--no-dashboard",
                 "--max-concurrent", "1"]) == 0
    trials = pd.read_parquet(sweep / "results" / "trials.parquet")
    swept, confirmed = trials[trials["stage"] == "sweep"], trials[trials["stage"] == "confirm"]
    assert len(swept) == 2 and len(confirmed) == 2
    best = swept.sort_values("best_recall_at_1", ascending=False, kind="stable").iloc[0]
    assert sorted(confirmed["seed"]) == [1, 2] and (confirmed["status"] == "completed").all()
    assert confirmed["config.evaluate_test"].all() and (confirmed["epochs_completed"] == 2).all()
    for key in ("config.normaliser.kind", "config.memory.ratio", "config.epochs"):
        assert (confirmed[key] == best[key]).all()
    for trial_id in confirmed["trial_id"]:
        epochs = pd.read_parquet(sweep / "results" / "epochs" / f"{trial_id}.parquet")
        assert list(epochs["epoch"]) == [1, 2] and epochs["test_recall_at_1"].notna().all()
        assert (epochs["stage"] == "confirm").all()
