"""tune/search/searchers.py's Optuna samplers (``--search tpe | gp | cmaes``): each name builds its own sampler,
seeded, so a seeded sweep suggests the same configs twice, past the samplers' random start-up trials."""
from __future__ import annotations

import math

import optuna
import pyarrow.parquet as pq
import pytest

from tune.driver.options import SweepOptions
from tune.search.searchers import PrunedOptunaSearch, build_searcher
from tune.search.spaces import load_space

from ..conftest import run_toy_sweep

CONTINUOUS = """description: two continuous keys, the kind of space gp and cmaes are for
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 1, warmup_epochs: 0, batch_size: 16,
       samples_per_class: 4, val_fraction: 0.2, device: cpu, normaliser.kind: pcxbn}
params:
  normaliser.lambda_mu: {uniform: [0.0, 1.0]}
  lr: {loguniform: [1.0e-5, 1.0e-2]}
"""
SAMPLER = {"optuna": optuna.samplers.TPESampler, "tpe": optuna.samplers.TPESampler,
           "gp": optuna.samplers.GPSampler, "cmaes": optuna.samplers.CmaEsSampler}


def _searcher(tmp_path, search: str, seed: int = 3) -> PrunedOptunaSearch:
    path = tmp_path / "space.yaml"
    path.write_text(CONTINUOUS)
    searcher, _, _ = build_searcher(load_space(str(path)), SweepOptions(search=search, seed=seed), 1)
    return searcher


def _drive(searcher, trials: int) -> list[dict]:
    """Suggest and complete ``trials`` trials in turn with a smooth objective (peak at lambda_mu 0.3, lr 1e-3)."""
    configs = []
    for i in range(trials):
        config = searcher.suggest(f"t{i}")
        value = -(config["normaliser.lambda_mu"] - 0.3) ** 2 - (math.log10(config["lr"]) + 3) ** 2
        searcher.on_trial_complete(f"t{i}", {"recall_at_1": value, "epoch": 1})
        configs.append({k: config[k] for k in ("normaliser.lambda_mu", "lr")})
    return configs


@pytest.mark.parametrize("search", sorted(SAMPLER))
def test_each_search_name_builds_its_sampler_seeded(tmp_path, search):
    """Bug caught: --search gp or cmaes silently running TPE (the registry's one factory ignoring the name),
    or a sampler left unseeded."""
    searcher = _searcher(tmp_path, search)
    assert type(searcher._ot_study.sampler) is SAMPLER[search]


@pytest.mark.parametrize("search, trials", [("gp", 12), ("cmaes", 6)])
def test_gp_and_cmaes_suggest_the_same_configs_for_the_same_seed(tmp_path, search, trials):
    """Bug caught: a sampler drawing from an unseeded generator (Optuna's GP start-up and CMA-ES both have
    one), so a seeded sweep cannot be repeated. The run goes past each sampler's random start-up trials
    (GP: 10, CMA-ES: 1), and a different seed gives different configs (the seed is really used)."""
    first, again = _drive(_searcher(tmp_path, search), trials), _drive(_searcher(tmp_path, search), trials)
    assert first == again
    assert _drive(_searcher(tmp_path, search, seed=4), trials) != first


@pytest.mark.slow
def test_a_seeded_cmaes_sweep_runs_the_same_configs_twice(ray_session, tmp_path):
    """Bug caught: the sweep's --seed not reaching the Optuna sampler inside Tune (e.g. a sampler built
    again, unseeded, when Tune restores the searcher)."""
    runs = []
    for name in ("a", "b"):
        plan, _ = run_toy_sweep(tmp_path, name, CONTINUOUS, search="cmaes", scheduler="fifo", num_samples=3,
                                max_concurrent=1, seed=5, stop_collapsed=False)
        frame = pq.read_table(f"{plan.results_uri}/trials.parquet").to_pandas()  # rows in the trials' order
        runs.append(frame[["config.normaliser.lambda_mu", "config.lr"]].values.tolist())
    assert runs[0] == runs[1] and len(runs[0]) == 3


@pytest.mark.parametrize("search", ["tpe", "gp", "nsga2"])
def test_several_objectives_reach_one_study_with_a_direction_each(tmp_path, search):
    """Bug caught: a second --metric dropped (a one-direction study), gpu_hours (not an epoch metric) told
    as missing so every trial FAILs, or a stopped trial told with intermediate values (Optuna refuses them
    for several objectives)."""
    from optuna.study import StudyDirection
    from optuna.trial import TrialState

    path = tmp_path / "space.yaml"
    path.write_text(CONTINUOUS)
    options = SweepOptions(search=search, metric="recall_at_1", mode="max", extra_metrics=("gpu_hours",),
                           extra_modes=("min",), gpus_per_trial=0.5)
    searcher, _, _ = build_searcher(load_space(str(path)), options, 2)
    study = searcher._ot_study
    assert study.directions == [StudyDirection.MAXIMIZE, StudyDirection.MINIMIZE]
    searcher.suggest("done")
    searcher.on_trial_result("done", {"recall_at_1": 0.4, "epoch": 1, "time_total_s": 3600.0})
    searcher.on_trial_complete("done", {"recall_at_1": 0.5, "epoch": 2, "time_total_s": 7200.0})
    searcher.suggest("stopped")
    searcher.on_trial_complete("stopped", {"recall_at_1": 0.1, "epoch": 1, "time_total_s": 60.0})
    done, stopped = study.get_trials(deepcopy=False)
    assert done.state == TrialState.COMPLETE and done.values == [0.5, 7200.0 * 0.5 / 3600.0]
    assert stopped.state == TrialState.PRUNED


def test_cmaes_with_several_objectives_is_refused():
    """Bug caught: CMA-ES (one objective) silently optimising only the first metric."""
    from tune.errors import SweepInputError
    from tune.search.searchers import check_search_options

    with pytest.raises(SweepInputError, match="several --metric need a searcher that optimises them jointly"):
        check_search_options(SweepOptions(search="cmaes", extra_metrics=("gpu_hours",), extra_modes=("min",)))


TWO_OBJECTIVES = CONTINUOUS.replace("  lr: {loguniform: [1.0e-5, 1.0e-2]}", "  memory.ratio: {uniform: [0.1, 1.0]}")


@pytest.mark.slow
def test_a_two_objective_sweep_records_both_and_has_a_front(ray_session, tmp_path):
    """Bug caught: the second objective lost between the CLI options and the files (sweep.json without it,
    trials.parquet without final_memory_bytes), or a front that cannot be read back from the sweep."""
    import analysis
    from analysis.dominance import non_dominated

    plan, built = run_toy_sweep(tmp_path, "two", TWO_OBJECTIVES, search="tpe", scheduler="fifo", num_samples=3,
                                seed=1, stop_collapsed=False, metric="recall_at_1", mode="max",
                                extra_metrics=("memory_bytes",), extra_modes=("min",))
    assert len(built.searcher._ot_study.directions) == 2
    sweep = analysis.load(plan.experiment_uri)
    assert sweep.record.metrics == ("recall_at_1", "memory_bytes") and sweep.record.modes == ("max", "min")
    trials = sweep.trials
    # the memory grows with memory.ratio, so the trials' memory_bytes differ and order like their ratios
    order = trials.sort_values("config.memory.ratio")["final_memory_bytes"].tolist()
    assert order == sorted(order) and trials["final_memory_bytes"].gt(0).all()
    points = trials[["final_recall_at_1", "final_memory_bytes"]].to_numpy(dtype=float)
    expected = set(trials.trial_id[non_dominated(points, ["max", "min"])])
    assert set(analysis.pareto(sweep).trial_id) == expected and expected


def test_every_search_a_space_may_name_has_a_searcher_and_no_other():
    """Bug caught: a search added to SEARCHES (what spaces and ``--search`` accept, checked before Ray) without a
    factory in SEARCHERS, or the other way round: a sweep accepted up front then refused, or a searcher no
    check lets anyone reach."""
    from tune.search.searchers import SEARCHERS
    from tune.search.spaces.space import SEARCHES

    assert sorted(SEARCHERS) == sorted(SEARCHES)
