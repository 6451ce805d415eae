"""tune/commands/refit.py: the chosen trial, the refit configs, the notes on test metrics, and end to end on digits
(sweep, refit, trials.parquet's refit rows with train_classes, export --stage refit)."""
from __future__ import annotations

import argparse

import pytest

from tests.tune.commands.test_confirm import ROWS, row, write_sweep
from tune.commands.refit import add_arguments
from tune.errors import SweepInputError
from tune.results.parquet import config_of
from tune.stages.refit import held_out_notes, plan_refit as plan, refit_configs


def args(path, *extra):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([path, *extra])


def test_refit_configs_change_only_the_seed_the_classes_and_the_set_keys():
    """Bug: a refit whose config differs from the trial's outside the keys it was told to change (seed, the class
    choice, --set keys): a dropped swept value, evaluate_test or val_fraction reset, epochs changed."""
    trial = ROWS[1]
    configs = refit_configs(trial, [7, 8], "train+val", {"lr": 0.5})
    original = {k: v for k, v in config_of(trial).items() if v is not None}
    for config, seed in zip(configs, [7, 8]):
        changed = {k for k in set(config) | set(original) if config.get(k) != original.get(k)}
        assert changed == {"seed", "train_on", "lr"}
        assert (config["seed"], config["train_on"], config["lr"]) == (seed, "train+val", 0.5)
        assert config["epochs"] == original["epochs"] and config["normaliser.lambda_mu"] == 0.3


def test_refit_on_all_classes_adds_the_held_out_classes_back():
    """Bug: a sweep on every class but its validation ones (train_on=all, val_fraction > 0, e.g. whole alphabets
    under val_by=superclass) refit with --classes all kept holding them out: val_fraction must go to 0 there,
    and only there."""
    trial = {**ROWS[1], "config.val_fraction": 0.25, "config.val_by": "superclass", "config.train_on": "all"}
    everything = refit_configs(trial, [1], "all")[0]
    assert (everything["val_fraction"], everything["val_by"], everything["train_on"]) == (0.0, "superclass", "all")
    assert refit_configs(trial, [1], "train+val")[0]["val_fraction"] == 0.25


def test_best_picks_the_best_finished_sweep_stage_trial(tmp_path):
    """Bug: --best picked a confirm or refit row, a failed or NaN trial, or an early-stopped trial over a completed
    one (ASHA culled it at a rung), instead of the sweep trial confirm ranks first."""
    refit_row = {**row("old_refit", 0.999, stage="refit"), "config.train_on": "train+val"}
    p = plan(args(write_sweep(tmp_path, [*ROWS, refit_row]), "--best", "--seeds", "2"))
    assert p.trial["trial_id"] == "b" and p.seeds == [1, 2]
    assert [c["seed"] for c in p.configs] == [1, 2] and all(c["train_on"] == "train+val" for c in p.configs)
    assert all(c["memory.ratio"] == 0.5 and c["normaliser.kind"] == "pcxbn" for c in p.configs)


def test_trial_picks_that_trial_and_bad_input_exits_2(tmp_path):
    """Bug: --trial ignored, an unknown id or a --set of the refit's own keys accepted."""
    path = write_sweep(tmp_path, ROWS)
    p = plan(args(path, "--trial", "c", "--classes", "all", "--seed-start", "10", "--seeds", "1"))
    assert p.trial["trial_id"] == "c" and p.configs[0]["train_on"] == "all" and p.configs[0]["seed"] == 10
    with pytest.raises(SweepInputError, match="'nope' is not a sweep or confirm trial"):
        plan(args(path, "--trial", "nope"))
    with pytest.raises(SweepInputError, match="train_on"):
        plan(args(path, "--best", "--set", "train_on=train"))
    with pytest.raises(SystemExit):  # --best or --trial is required
        args(path)


def test_classes_all_says_where_its_test_metrics_come_from():
    """Bug: a refit with no held-out classes reported (or implied) test metrics: it must say that there are none
    unless the data set defines an external protocol, and name that protocol (Omniglot: xbm-tune oneshot)."""
    trial = {"config.val_fraction": 0.2}
    assert held_out_notes(trial, {"dataset": "toy"}, "train+val", "S") == []
    toy = " ".join(held_out_notes(trial, {"dataset": "toy"}, "all", "S"))
    assert "test metrics are not available for --classes all" in toy and "no external test protocol" in toy
    omniglot = " ".join(held_out_notes(trial, {"dataset": "omniglot"}, "all", "S"))
    assert "xbm-tune oneshot" in omniglot and "export S --stage refit" in omniglot
    assert "optimistic" in " ".join(held_out_notes({"config.val_fraction": 0.0}, {"dataset": "toy"}, "train+val", "S"))


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
