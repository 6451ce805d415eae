"""Learning curves, ASHA survival, drift and staleness per variant."""
import pytest

from analysis import NotApplicable, asha_survival, drift_staleness, learning_curves, load


def test_learning_curves(finished_sweep):
    curves = learning_curves(load(finished_sweep))
    assert len(curves) == 102
    one = curves[curves["trial_id"] == "xbn_0.5_1"]
    assert list(one["epoch"]) == [1, 2, 3, 4]
    assert list(one["value"]) == pytest.approx([0.64 * 0.7, 0.64 * 0.8, 0.64 * 0.9, 0.64])
    assert set(curves["status"]) == {"completed", "stopped_early"}
    with pytest.raises(NotApplicable, match="no_such_metric"):
        learning_curves(load(finished_sweep), "no_such_metric")


def test_asha_survival_counts_and_rungs(finished_sweep):
    survival = asha_survival(load(finished_sweep))
    m = survival.milestones
    assert list(m["reached"]) == [28, 26, 24, 24]
    assert list(m["stopped_early"]) == [2, 2, 0, 0]
    assert list(m["completed"]) == [0, 0, 0, 24]
    assert survival.rungs == (1, 2, 4) and list(m["rung"]) == [True, True, False, True]
    assert m["share"].iloc[1] == pytest.approx(26 / 28)
    reasons = survival.trials.set_index("trial_id")["stop_reason"]
    assert reasons["xbn_stopped"] == "asha: below the rung-2 cutoff"


def test_survival_marks_the_rungs_sweep_json_records(tmp_path, build_sweep):
    """Bug caught: a sweep run with --rungs (placed by the schedule, or listed) drawn with the geometric rungs of
    its grace period and reduction factor, which it was never judged at."""
    trials, epochs = build_sweep["finished_rows"]()
    folder = build_sweep["write_sweep"](tmp_path / "placed", trials, epochs,
                                        {"rungs": [3, 9], "options": {"rungs": "3,9"}})
    survival = asha_survival(load(folder))
    assert survival.rungs == (3,) and list(survival.milestones["rung"]) == [False, False, True, False]


def test_survival_of_a_running_sweep(running_sweep):
    with pytest.warns(UserWarning):
        survival = asha_survival(load(running_sweep))
    m = survival.milestones.set_index("epoch")
    assert m.loc[1, "reached"] == 3  # t0, t1, t2 (t4 has no epoch yet)
    assert m.loc[2, "stopped_here"] == 0  # t1 is still running, not stopped
    assert m.loc[3, "stopped_here"] == 1  # t2 (status unknown) ended there as far as we can tell


def test_drift_and_staleness_per_variant(finished_sweep):
    table = drift_staleness(load(finished_sweep))
    drift = table[table["quantity"] == "drift_mean"].set_index(["variant", "epoch"])
    assert 1 not in drift.index.get_level_values("epoch")  # NaN at epoch 1 by definition
    assert drift.loc[("xbn", 2), "mean"] == pytest.approx(0.2) and drift.loc[("xbn", 2), "n"] == 7
    stale = table[table["quantity"] == "staleness_mean"].set_index(["variant", "epoch"])
    assert stale.loc[("pcxbn", 4), "mean"] == pytest.approx(0.4) and stale.loc[("pcxbn", 4), "n"] == 6


def test_drift_not_applicable_without_columns(build_sweep, tmp_path):
    b = build_sweep
    cfg = b["config"]("xbn", 0.5, 0)
    rows = [{k: v for k, v in r.items() if k not in ("drift_mean", "staleness_mean")}
            for r in b["epoch_rows"]("x", cfg, 0.6, 2)]
    folder = b["write_sweep"](tmp_path / "nodrift", [b["trial_row"]("x", cfg, rows, "completed")], rows)
    with pytest.raises(NotApplicable, match="drift_mean"):
        drift_staleness(load(folder))
