"""analysis/refit.py and the report's refit section: test values per seed at the last epoch, their interval,
``train_classes``; a run on every class has no test value; sweeps written before train_classes still load."""
from __future__ import annotations

import math
import warnings

import pytest

from analysis import load, plots
from analysis.compare import t_interval
from analysis.refit import refit_groups, refit_runs
from analysis.report import write_report

from .conftest import CONFIG_TYPES, MAX_EPOCHS, config, epoch_rows, finished_rows, trial_row, write_sweep

REFIT = {("train+val", 20): (0.50, 0.56, 0.53), ("all", 25): (0.90,)}  # best R@1 per seed, rising to the last epoch


@pytest.fixture
def refit_sweep(tmp_path, monkeypatch):
    monkeypatch.setitem(CONFIG_TYPES, "train_on", str)  # the slice of TrainConfig the fixture writes
    monkeypatch.setattr(plots, "DPI", 30)
    trials, epochs = finished_rows()
    for (classes, count), values in REFIT.items():
        for seed, best in zip((1, 2, 3), values):
            trial_id = f"refit_{classes}_{seed}"
            cfg = config("pcxbn", 0.5, seed, train_on=classes)
            rows = [{**r, "eval_split": "test" if classes != "all" else "train", "train_classes": count}
                    for r in epoch_rows(trial_id, cfg, best, MAX_EPOCHS, stage="refit")]
            rows[-1]["recall_at_1"] = best - 0.1  # the last epoch is not the best: the value is the last epoch's
            epochs += rows
            trials.append({**trial_row(trial_id, cfg, rows, "completed", stage="refit"), "train_classes": count})
    return write_sweep(tmp_path / "refit", trials, epochs)


def test_refit_values_are_the_last_epochs_test_values_with_an_interval(refit_sweep):
    """Bug: the refit's test value taken at its best epoch (a choice made on the test classes), a run trained on
    every class given a test value, or the runs of two class choices pooled into one interval."""
    groups = {g.frame["classes"].iloc[0]: g for g in refit_groups(load(refit_sweep))}
    finals = [round(v - 0.1, 6) for v in REFIT[("train+val", 20)]]
    held_out = groups["train+val"]
    assert [round(v, 6) for v in held_out.frame["test"]] == finals and list(held_out.frame["seed"]) == [1, 2, 3]
    assert held_out.interval.n == 3 and held_out.interval.mean == pytest.approx(t_interval(finals).mean)
    assert list(held_out.frame["train_classes"]) == [20, 20, 20]
    everything = groups["all"]
    assert math.isnan(everything.frame["test"].iloc[0]) and everything.interval.n == 0


def test_the_report_has_a_refit_section(refit_sweep):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = write_report(refit_sweep).read_text()
    section = text.split("## Refit")[1].split("## ")[0]
    assert "on train+val classes: mean 0.4300, 95% t-interval [" in section and "over 3 completed run(s)" in section
    assert "on all classes: no test value" in section and "xbm-tune oneshot" in section
    assert "| refit_train+val_2 | 2 | train+val | 20 |" in section


def test_a_sweep_without_refit_or_train_classes_loads_and_says_so(build_sweep, tmp_path):
    """Bug: sweeps written before train_classes existed failed to load, or their report lost the other sections."""
    trials, epochs = finished_rows()
    folder = write_sweep(tmp_path / "old", trials, epochs)
    sweep = load(folder)
    assert "train_classes" not in sweep.trials.columns and len(sweep.stage_trials("sweep")) == len(trials)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = write_report(folder).read_text()
    assert "_Omitted: no refit stage" in text.split("## Refit")[1] and "## Leaderboard" in text
    with pytest.raises(Exception, match="no refit stage"):
        refit_runs(sweep)
