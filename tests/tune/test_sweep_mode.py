"""A sweep that minimises (``xbm-tune sweep SPACE --metric M --mode min``), end to end on the toy trainable: every
place that ranks its trials or epochs (ASHA, the trials' best weights, ``best_<metric>``, the sweep's closing
line, ``status``, ``confirm`` / ``refit``'s selection, ``export --best``, ``analysis``) keeps the LOWEST value.

The metric is ``loss`` (every epoch reports it, lower is better), standing in for ``val_oneshot_error``."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import torch

# three learning rates two decades apart, run in this order: their losses differ clearly on the toy data (seed 0,
# measured: epoch-1 loss 4.59, 6.08, 5.23; 1e-6's rises at epoch 2, so its lowest epoch is its first), so that
# ASHA stops the second trial (above the first's loss) and keeps the third (below the median of the two before),
# where a sweep that maximised would do the opposite
SPACE = """description: a sweep on a lower-is-better metric (--metric loss --mode min)
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 2, warmup_epochs: 0, batch_size: 16,
       samples_per_class: 4, val_fraction: 0.2, device: cpu}
params:
  lr: {grid: [1.0e-4, 1.0e-2, 1.0e-6]}
"""


@pytest.fixture(scope="module")
def min_sweep(ray_session, tmp_path_factory):
    """The sweep run once through the CLI (ASHA, rungs 1 and 2 of factor 2, one trial at a time): its folder
    and what the command printed."""
    import contextlib
    import io

    from tune.cli import main

    root = tmp_path_factory.mktemp("min_sweep")
    (root / "space.yaml").write_text(SPACE)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["sweep", str(root / "space.yaml"), "--metric", "loss", "--mode", "min", "--search", "grid",
                     "--scheduler", "asha", "--grace-period", "1", "--reduction-factor", "2", "--max-concurrent", "1",
                     "--no-stop-collapsed", "--no-dashboard", "--storage", str(root), "--name", "min", "--seed", "0"])
    assert code == 0, out.getvalue()
    folder = root / "min"
    trials = pd.read_parquet(folder / "results" / "trials.parquet").sort_values("trial_id", ignore_index=True)
    epochs = pd.read_parquet(folder / "results" / "epochs").sort_values(["trial_id", "epoch"], ignore_index=True)
    return folder, trials, epochs, out.getvalue()


def lowest_and_highest(trials: pd.DataFrame) -> tuple[str, str]:
    ranked = trials.sort_values("best_loss", kind="stable")
    lowest, highest = ranked["trial_id"].iloc[0], ranked["trial_id"].iloc[-1]
    assert ranked["best_loss"].iloc[0] < ranked["best_loss"].iloc[-1], "the test needs trials that differ"
    return lowest, highest


@pytest.mark.slow
def test_a_min_sweep_summarises_each_trial_at_its_lowest_epoch_and_keeps_those_weights(min_sweep):
    """Bug caught: a sweep with --mode min keeping each trial's WORST epoch: ``best_<metric>`` / ``best_epoch`` in
    trials.parquet (the sink's summary), or the trial's ``best_weights.pt`` (the trial's own best-epoch rule), taken
    as the largest value, or sweep.json recording the default mode."""
    import json

    folder, trials, epochs, _ = min_sweep
    record = json.loads((folder / "results" / "sweep.json").read_text())
    assert (record["metric"], record["mode"]) == ("loss", "min")
    assert len(trials) == 3 and set(trials["status"]) <= {"completed", "stopped_early"}
    for _, trial in trials.iterrows():
        losses = epochs[epochs["trial_id"] == trial["trial_id"]].set_index("epoch")["loss"]
        assert trial["best_loss"] == losses.min() and trial["best_epoch"] == losses.idxmin()
        assert trial["final_loss"] == losses.iloc[-1]
        payload = torch.load(trial["best_weights"], map_location="cpu", weights_only=True)
        assert (payload["metric"], payload["epoch"]) == ("loss", trial["best_epoch"])
        assert payload["value"] == pytest.approx(trial["best_loss"])
    # two epochs: a trial that ran both and whose loss moved has its lowest and highest epochs apart
    ran_both = trials[trials["epochs_completed"] == 2]
    assert len(ran_both) >= 1
    for _, trial in ran_both.iterrows():
        losses = epochs[epochs["trial_id"] == trial["trial_id"]]["loss"]
        assert trial["best_loss"] < losses.max()


@pytest.mark.slow
def test_asha_under_mode_min_stops_the_trials_whose_loss_is_above_the_rung_cutoff(min_sweep):
    """Bug caught: ASHA ranking a min sweep's trials as if higher were better (culling the lowest losses), or the
    stop reason saying "below the rung cutoff" for a trial stopped for being above it. Ray's rule with reduction
    factor 2: a trial is stopped at rung 1 when its epoch-1 loss is above the median of the epoch-1 losses of the
    trials judged there before it (one trial at a time: in trial order)."""
    _, trials, epochs, _ = min_sweep
    at_rung = epochs[epochs["epoch"] == 1].set_index("trial_id")["loss"]
    seen: list[float] = []
    for _, trial in trials.iterrows():  # trial ids in creation order: the order they ran
        loss = float(at_rung[trial["trial_id"]])
        stopped = bool(seen) and loss > float(np.nanpercentile(seen, 50))
        assert trial["status"] == ("stopped_early" if stopped else "completed"), (trial["trial_id"], loss, seen)
        if stopped:
            assert re.fullmatch(r"asha: loss=\S+ above the rung cutoff at epoch 1 after 1/2 epochs",
                                trial["stop_reason"]), trial["stop_reason"]
        seen.append(loss)
    assert (trials["status"] == "stopped_early").any(), "the test needs ASHA to stop a trial"


@pytest.mark.slow
def test_every_selection_of_a_min_sweep_takes_its_lowest_trial(min_sweep):
    """Bug caught: a sweep with --mode min keeping the WORST trial: the sweep's closing "best trial" line
    (``SweepOutcome.best``), ``status``'s order, ``confirm --top`` / ``refit --best`` (``select_top``),
    ``export --best`` (``pick_trial``) or ``analysis``'s leaderboard taking the highest ``best_loss``."""
    import analysis
    from tune.stages.selection import front_rows, select_top
    from tune.commands.export import pick_trial
    from tune.stages.refit import pick
    from tune.results.record import read_record
    from tune.results.status import load_status, status_table
    from tune.search.warm_start import read_trials

    folder, trials, _, printed = min_sweep
    lowest, highest = lowest_and_highest(trials)
    assert f"best trial (by its best epoch): {lowest} (" in printed
    record, frame = load_status(str(folder))
    table = status_table(record, frame).splitlines()
    first = next(i for i, line in enumerate(table) if line.lstrip().startswith("trial_id")) + 1
    assert table[first].split()[0] == lowest and table[-1].split()[0] == highest
    assert "metric loss (min)" in table[0]
    rows = read_trials(str(folder))
    record = read_record(str(folder))
    assert [c.trial_id for c in select_top(front_rows(rows, record), record.metric, record.mode, 3)][0] == lowest
    assert pick(rows, record, None)["trial_id"] == lowest
    assert pick_trial(frame, None, "sweep", record.metric, record.mode)["trial_id"] == lowest
    sweep = analysis.load(str(folder))
    assert not sweep.higher_is_better("loss")
    board = analysis.leaderboard(sweep)
    assert board["trial_id"].iloc[0] == lowest and board["trial_id"].iloc[-1] == highest
