"""tune/stages/refit.py: the chosen trial, the refit configs and the notes on test metrics, from the command's
arguments on a hand-written sweep."""
from __future__ import annotations

import argparse

import pytest

from tests.tune.stages.sweep_rows import ROWS, row, write_sweep
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
