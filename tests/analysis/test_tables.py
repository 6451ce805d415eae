"""Leaderboard, best per kind, status counts, stop reasons."""
import pandas as pd
import pytest

from analysis import best_per_kind, leaderboard, load, status_counts, stop_reasons


def test_leaderboard_ranks_by_best_metric(finished_sweep):
    board = leaderboard(load(finished_sweep))
    assert list(board["rank"]) == list(range(1, 29))
    assert list(board["trial_id"][:2]) == ["pcxbn_0.5_2", "pcxbn_0.5_1"]
    assert list(board["best_recall_at_1"][:2]) == pytest.approx([0.70, 0.69])
    assert board["best_recall_at_1"].is_monotonic_decreasing
    assert board["trial_id"].iloc[-1] == "none_stopped"
    swept = {c for c in board.columns if c.startswith("config.")}
    assert swept == {"config.memory.ratio", "config.normaliser.kind", "config.normaliser.lambda_mu",
                     "config.normaliser.lambda_sigma", "config.normaliser.kalman_r"}
    top = leaderboard(load(finished_sweep), top=3, statuses=("stopped_early",))
    assert list(top["trial_id"]) == ["xbn_stopped", "axbn_stopped", "pcxbn_stopped"]


def test_leaderboard_minimised_metric_and_missing_values_last(running_sweep):
    with pytest.warns(UserWarning):
        sweep = load(running_sweep)
    board = leaderboard(sweep)
    assert board["trial_id"].iloc[-1] == "t4" and pd.isna(board["best_recall_at_1"].iloc[-1])
    by_loss = leaderboard(sweep, "loss")
    assert by_loss["best_loss"].dropna().is_monotonic_increasing


def test_best_per_kind(finished_sweep):
    best = best_per_kind(load(finished_sweep)).set_index("kind")
    assert best["trial_id"].to_dict() == {"pcxbn": "pcxbn_0.5_2", "xbn": "xbn_0.5_2", "axbn": "axbn_0.1_2",
                                          "none": "none_0.5_1"}
    assert set(best["n_trials"]) == {7}


def test_status_counts_and_stop_reasons(failed_sweep):
    sweep = load(failed_sweep)
    counts = status_counts(sweep).set_index("status")["n_trials"].to_dict()
    assert counts == {"completed": 2, "failed": 1}
    reasons = stop_reasons(sweep).set_index("status")
    assert reasons.loc["failed", "stop_reason"] == "non-finite loss"
    assert reasons.loc["failed", "mean_epochs"] == 1
    assert "bad" in set(leaderboard(sweep)["trial_id"])


def test_stop_reasons_group_trials_culled_at_the_same_rung(build_sweep, tmp_path):
    b = build_sweep
    trials, epochs = [], []
    for i, value in enumerate((0.55, 0.6125, 0.7)):
        cfg = b["config"]("xbn", 0.5, i)
        rows = b["epoch_rows"](f"s{i}", cfg, value, 1 if i < 2 else 4)
        epochs += rows
        reason = (f"asha: recall_at_1={value} below the rung cutoff at epoch 1 after 1/3 epochs" if i < 2
                  else "reached the epoch budget (4)")
        trials.append(b["trial_row"](f"s{i}", cfg, rows, "stopped_early" if i < 2 else "completed", stop_reason=reason))
    reasons = stop_reasons(load(b["write_sweep"](tmp_path / "rungs", trials, epochs)))
    row = reasons.set_index("status").loc["stopped_early"]
    assert row["n_trials"] == 2
    assert row["stop_reason"] == "asha: recall_at_1=… below the rung cutoff at epoch 1 after 1/3 epochs"


def test_recall_at_k_shows_the_runs_k_set_at_the_best_epoch(finished_sweep, build_sweep, tmp_path):
    """Bugs caught: the Recall@K table fixed to (1, 10) instead of the set the runs reported (CUB's 1, 2, 4, 8),
    its columns in string order (recall_at_10 before recall_at_2), or values read at the last epoch instead of
    the trial's best one by the sweep metric."""
    from analysis.tables import recall_at_k

    table = recall_at_k(load(finished_sweep), top=2)
    assert list(table.columns) == ["rank", "trial_id", "recall_at_1", "recall_at_10"]
    assert list(table["trial_id"]) == ["pcxbn_0.5_2", "pcxbn_0.5_1"]
    assert table["recall_at_1"].tolist() == pytest.approx([0.70, 0.69])
    assert table["recall_at_10"].tolist() == pytest.approx([0.90, 0.89])   # min(1, R@1 + 0.2)

    trials, epochs = build_sweep["finished_rows"]()
    for row in epochs:
        r1 = row.pop("recall_at_1")
        row.pop("recall_at_10")
        # the papers' CUB set; the last epoch is worse than the third, which must be read
        r1 = r1 if row["epoch"] < 4 else r1 - 0.3
        row.update(recall_at_1=r1, recall_at_2=r1 + 0.05, recall_at_4=r1 + 0.1, recall_at_8=r1 + 0.15)
    cub = build_sweep["write_sweep"](tmp_path / "cub", trials, epochs)
    table = recall_at_k(load(cub), "recall_at_1", top=1)
    assert list(table.columns) == ["rank", "trial_id", "recall_at_1", "recall_at_2", "recall_at_4", "recall_at_8"]
    best3 = 0.70 * 0.9   # pcxbn_0.5_2 at epoch 3: best x (1 - 0.1)
    assert table.iloc[0, 2:].tolist() == pytest.approx([best3, best3 + 0.05, best3 + 0.1, best3 + 0.15])
