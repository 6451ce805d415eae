"""tune/optuna_study.py: one Parquet trial row -> one Optuna trial (the export), and where the live study
lives. (The live study and the export of a real sweep, compared: tests/tune/test_watch.py.)"""
from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from tune.optuna_study import RAY_TRIAL_ID, add_trial, live_journal
from tune.options import SweepInputError
from tune.spaces import load_space

SPACE = """description: a random-search space with a condition, for the export test
base: {dataset: toy, model: mlp, epochs: 3}
params:
  normaliser.kind: {choice: [none, xbn, pcxbn]}
  normaliser.lambda_mu: {choice: [0.25, 0.75], when: {normaliser.kind: pcxbn}}
"""


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(SPACE)
    return load_space(str(path))


def _row(trial_id, status, kind, lam=None, final=None):
    return {"trial_id": trial_id, "status": status, "config.normaliser.kind": kind,
            "config.normaliser.lambda_mu": lam, f"final_recall_at_1": final}


def test_statuses_map_to_optuna_states_with_params_curves_and_ids(space):
    """Bugs caught: a stopped_early trial exported as COMPLETE (the bias the sweep avoids), a conditional
    param absent from its trial exported anyway, a NaN epoch reported, a running trial told a state."""
    study = optuna.create_study(direction="maximize")
    rows = [(_row("a", "completed", "pcxbn", 0.75, 0.6), [(1, 0.4), (2, 0.5), (3, 0.6)]),
            (_row("b", "stopped_early", "xbn"), [(1, 0.3)]),
            (_row("c", "failed", "none"), [(1, float("nan"))]),
            (_row("d", "running", "xbn"), [(2, 0.45), (1, 0.35)])]
    states = [add_trial(study, space, row, curve, "recall_at_1") for row, curve in rows]
    assert states == ["COMPLETE", "PRUNED", "FAIL", "RUNNING"]
    a, b, c, d = study.get_trials(deepcopy=False)
    assert a.params == {"normaliser.kind": "pcxbn", "normaliser.lambda_mu": 0.75} and a.value == 0.6
    assert a.intermediate_values == {1: 0.4, 2: 0.5, 3: 0.6}
    assert b.state == TrialState.PRUNED and b.params == {"normaliser.kind": "xbn"} and b.value == 0.3
    assert c.state == TrialState.FAIL and c.intermediate_values == {}
    assert d.state == TrialState.RUNNING and d.intermediate_values == {1: 0.35, 2: 0.45}
    assert [t.user_attrs[RAY_TRIAL_ID] for t in (a, b, c, d)] == ["a", "b", "c", "d"]


def test_a_point_outside_the_space_is_refused_not_resampled(space):
    """Bug caught: Optuna silently samples another value for an enqueued point outside the space, and the
    export would show a config the trial never ran."""
    with pytest.raises(SweepInputError, match="not a point of the sweep's space"):
        add_trial(optuna.create_study(), space, _row("e", "completed", "pcxbn", 0.5, 0.7), [], "recall_at_1")


def test_live_journal_only_on_a_local_folder():
    """Bug caught: a journal path built on a bucket URI (a file backend cannot append to s3)."""
    assert live_journal("/data/sweeps/x/results") == "/data/sweeps/x/results/optuna.journal"
    assert live_journal("file:///data/x/results") == "/data/x/results/optuna.journal"
    assert live_journal("s3://bucket/x/results") is None
