"""tune/search/optuna_study.py: one Parquet trial row -> one Optuna trial (the export), and where the live study
lives. (The live study and the export of a real sweep, compared: tests/tune/test_watch.py.)"""
from __future__ import annotations

import optuna
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from optuna.trial import TrialState

from analysis.contract import SpaceRecord, SweepRecord
from tune.errors import SweepInputError
from tune.results.record import write_record
from tune.search.optuna_study import RAY_TRIAL_ID, add_trial, export_optuna, journal_storage, live_journal
from tune.search.spaces import SpaceError, load_space

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


# a random sweep's space: a grid (every value run) crossed with a choice (drawn)
GRID_SPACE = """description: a grid x choice space, for the export of a random or grid sweep
base: {dataset: toy, model: mlp, epochs: 2}
params:
  seed: {grid: [0, 1]}
  normaliser.kind: {choice: [none, xbn]}
"""
# the same params without a grid (an optuna sweep's space): the journal checks hold without the grid fix
CHOICE_SPACE = GRID_SPACE.replace("{grid:", "{choice:")


def write_sweep(folder, name, trials, space=GRID_SPACE):
    """A finished sweep folder as the sink leaves it (sweep.json, trials.parquet, an epoch file per trial), no
    Ray: ``trials`` are (trial_id, seed, kind, final recall) rows of ``space``, each with a two-epoch curve."""
    results = folder / "results"
    (results / "epochs").mkdir(parents=True)
    write_record(str(results), SweepRecord(experiment=name, max_epochs=2,
                                           space=SpaceRecord(name="toy", text=space)))
    rows = [{"trial_id": t, "stage": "sweep", "status": "completed", "config.seed": seed,
             "config.normaliser.kind": kind, "final_recall_at_1": final} for t, seed, kind, final in trials]
    pq.write_table(pa.Table.from_pylist(rows), results / "trials.parquet")
    for t, _, _, final in trials:
        curve = [{"trial_id": t, "epoch": e, "recall_at_1": final * e / 2} for e in (1, 2)]
        pq.write_table(pa.Table.from_pylist(curve), results / "epochs" / f"{t}.parquet")
    return folder


def test_a_grid_param_is_exported_as_a_categorical_over_its_grid(tmp_path):
    """Bug caught: export-optuna exits 1 on every sweep with a grid param (the export suggested it through the
    live searcher's define_by_run, whose Grid.suggest refuses), though it is offered for any sweep."""
    folder = write_sweep(tmp_path / "g", "g", [("a", 0, "xbn", 0.5), ("b", 1, "none", 0.6)])
    out, name, counts = export_optuna(str(folder))
    assert (out, name, counts) == (str(folder / "results" / "optuna.journal"), "g", {"COMPLETE": 2})
    a, b = optuna.load_study(study_name="g", storage=journal_storage(out)).trials
    assert a.params == {"seed": 0, "normaliser.kind": "xbn"} and b.params == {"seed": 1, "normaliser.kind": "none"}
    assert a.distributions["seed"] == optuna.distributions.CategoricalDistribution([0, 1])
    assert b.intermediate_values == {1: 0.3, 2: 0.6} and b.value == 0.6


def test_the_live_optuna_search_still_refuses_a_grid_param(tmp_path):
    """Bug caught: the export's categorical for a grid param leaking into the live searcher, where TPE would
    sample what the user asked to enumerate (check_search and Grid.suggest must still refuse)."""
    path = tmp_path / "grid.yaml"
    path.write_text(GRID_SPACE)
    space = load_space(str(path))
    with pytest.raises(SpaceError, match="cannot run grid params"):
        space.check_search("optuna")
    with pytest.raises(TypeError, match="cannot be suggested by Optuna"):
        space.define_by_run(optuna.create_study().ask())


def test_a_refused_export_leaves_no_journal_and_a_shared_journal_unchanged(tmp_path):
    """Bug caught: the journal created before the trials are checked, so a refused export left an empty
    results/optuna.journal behind (or a half-built study appended to a journal given with --out)."""
    bad = write_sweep(tmp_path / "bad", "bad", [("a", 0, "xbn", 0.5), ("b", 1, "pcxbn", 0.6)], CHOICE_SPACE)
    with pytest.raises(SweepInputError, match="not a point of the sweep's space"):
        export_optuna(str(bad))
    assert sorted(p.name for p in (bad / "results").iterdir()) == ["epochs", "sweep.json", "trials.parquet"]
    shared = tmp_path / "shared.journal"
    export_optuna(str(write_sweep(tmp_path / "good", "good", [("c", 1, "xbn", 0.4)], CHOICE_SPACE)), str(shared))
    before = shared.read_bytes()
    with pytest.raises(SweepInputError, match="not a point of the sweep's space"):
        export_optuna(str(bad), str(shared))
    assert shared.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "bad", "good", "shared.journal"]


def test_an_export_into_a_journal_with_another_study_keeps_both(tmp_path):
    """Bug caught: the finished study moved over a journal given with --out that holds another sweep's study,
    losing it (the move is only for a new file; an existing journal gets the study appended)."""
    shared = str(tmp_path / "shared.journal")
    export_optuna(str(write_sweep(tmp_path / "one", "one", [("a", 0, "xbn", 0.5)], CHOICE_SPACE)), shared)
    export_optuna(str(write_sweep(tmp_path / "two", "two", [("b", 1, "none", 0.6)], CHOICE_SPACE)), shared)
    studies = {s.study_name: s.n_trials for s in optuna.get_all_study_summaries(journal_storage(shared))}
    assert studies == {"one": 1, "two": 1}
