"""analysis.values: the per-trial value from trials.parquet, falling back to the epoch rows."""
import pytest

from analysis import NotApplicable, load
from analysis.values import confirm_values, finished, metric_values


def _by_id(sweep, values, stage="sweep"):
    return dict(zip(sweep.stage_trials(stage)["trial_id"], values))


def test_table_values_and_epoch_fallback(finished_sweep):
    sweep = load(finished_sweep)
    best = _by_id(sweep, metric_values(sweep))
    assert best["xbn_0.5_1"] == pytest.approx(0.64)
    # recall_at_10 is not in trials.parquet: the epochs give it (min(1, R@1 + 0.2), highest at epoch 4)
    assert _by_id(sweep, metric_values(sweep, "recall_at_10"))["xbn_0.5_1"] == pytest.approx(0.84)
    # lower is better for the loss (2 / epoch): best is the last epoch's 0.5, final too
    assert _by_id(sweep, metric_values(sweep, "loss"))["xbn_0.5_1"] == pytest.approx(0.5)
    stopped = _by_id(sweep, metric_values(sweep, "loss", how="final"))["none_stopped"]
    assert stopped == pytest.approx(2.0)
    with pytest.raises(ValueError, match="how"):
        metric_values(sweep, how="median")


def test_confirm_values_are_final_test_metric(confirm_sweep, finished_sweep):
    sweep = load(confirm_sweep)
    values, label = confirm_values(sweep)
    assert label == "final test_recall_at_1"
    got = _by_id(sweep, values, "confirm")
    assert [got[f"confirm_pcxbn_{s}"] for s in (10, 11, 12)] == pytest.approx([0.59, 0.61, 0.56])
    with pytest.raises(NotApplicable, match="confirm"):
        confirm_values(load(finished_sweep))


def test_finished_means_full_budget(running_sweep, failed_sweep):
    with pytest.warns(UserWarning):
        sweep = load(running_sweep)
    done = dict(zip(sweep.trials["trial_id"], finished(sweep.trials)))
    assert done == {"t0": True, "t1": False, "t4": False, "t2": False}
    trials = load(failed_sweep).trials.copy()
    assert dict(zip(trials["trial_id"], finished(trials))) == {"ok0": True, "ok1": True, "bad": False}
    # a run left `running` by a dead driver after its last epoch counts; a failed one never does
    trials["status"] = trials["status"].where(trials["trial_id"] != "ok0", "running")
    trials["epochs_completed"] = trials["epochs_completed"].where(trials["trial_id"] != "bad", 4)
    assert list(finished(trials)) == [True, True, False]
