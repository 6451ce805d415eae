"""Parameter importance on an Optuna study rebuilt from the Parquet."""
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution

import analysis.importance as importance_module
from analysis import NotApplicable, load, param_importance, rebuild_study
from analysis.importance import common_epoch


def test_rebuilt_study_has_inferred_distributions(finished_sweep):
    study, label, excluded = rebuild_study(load(finished_sweep))
    assert len(study.trials) == 24 and label == "best_recall_at_1 of trials that finished their epoch budget"
    dists = {}
    for trial in study.trials:
        dists.update(trial.distributions)
    assert dists["memory.ratio"] == FloatDistribution(0.1, 0.5, log=True)
    assert dists["normaliser.kind"] == CategoricalDistribution(["axbn", "none", "pcxbn", "xbn"])
    assert dists["normaliser.lambda_mu"] == FloatDistribution(0.4, 0.6)
    with_mu = [t for t in study.trials if "normaliser.lambda_mu" in t.params]
    assert len(with_mu) == 6
    assert set(excluded) == {"normaliser.lambda_mu", "normaliser.lambda_sigma", "normaliser.kalman_r"}
    assert max(t.value for t in study.trials) == pytest.approx(0.70)
    assert study.best_trial.user_attrs["trial_id"] == "pcxbn_0.5_2"


def test_fanova_ranks_kind_first(finished_sweep):
    result = param_importance(load(finished_sweep))
    assert result.evaluator == "fanova" and result.n_trials == 24
    assert list(result.table["param"]) == ["normaliser.kind", "memory.ratio"]
    assert result.table["importance"].sum() == pytest.approx(1.0)
    at_rung = param_importance(load(finished_sweep), at_epoch=1)
    assert at_rung.n_trials == 28 and "epoch 1" in at_rung.value


def test_fallback_evaluator(finished_sweep, monkeypatch):
    real = importance_module._evaluator

    def broken_fanova(name, seed):
        if name == "fanova":
            raise RuntimeError("fanova unavailable")
        return real(name, seed)

    monkeypatch.setattr(importance_module, "_evaluator", broken_fanova)
    result = param_importance(load(finished_sweep))
    assert result.evaluator == "mean_decrease_impurity" and "fanova" in result.errors
    assert result.table["param"].iloc[0] == "normaliser.kind"
    with pytest.raises(ValueError, match="valid"):
        param_importance(load(finished_sweep), evaluator="shap")


def test_too_few_trials(failed_sweep):
    with pytest.raises(NotApplicable, match="at least"):
        param_importance(load(failed_sweep))


def test_common_epoch(finished_sweep, failed_sweep, running_sweep):
    assert common_epoch(load(finished_sweep)) is None  # 24 trials finished their budget
    assert common_epoch(load(failed_sweep)) == 4  # the failed trial's single epoch does not count
    with pytest.warns(UserWarning):
        assert common_epoch(load(running_sweep)) == 2  # t1 (running) reached 2; t4 has none yet
