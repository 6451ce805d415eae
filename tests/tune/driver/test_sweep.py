"""tune/driver/sweep.py, tune/search/searchers.py, tune/search/schedulers.py: input checks before Ray, the registries,
the ASHA-stopped-trials-as-PRUNED fix for Optuna, a real ASHA + Optuna sweep on the toy trainable, and
fixed configs (the confirm stage) written into an existing sweep."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import ray
from optuna.trial import TrialState
from ray.tune.schedulers import AsyncHyperBandScheduler, HyperBandScheduler, PopulationBasedTraining
from ray.tune.schedulers.pb2 import PB2
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from tune.driver.options import SweepOptions
from tune.driver.plan import prepare
from tune.driver.sweep import run_configs, run_sweep, tune_samples
from tune.errors import SweepInputError
from tune.results.record import outcome
from tune.search.schedulers import SCHEDULERS, GuardedFIFO, build_scheduler
from tune.search.searchers import SEARCHERS, FixedConfigs, PrunedOptunaSearch, build_searcher
from tune.search.spaces import SpaceError, load_space

from ..conftest import run_toy_sweep

TOY = """description: toy sweep for the tests
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 3, warmup_epochs: 0, batch_size: 128,
       samples_per_class: 4, lr: 1.0e-3}
params:
  normaliser.kind: {choice: [none, xbn, pcxbn]}
  normaliser.lambda_mu: {uniform: [0.0, 1.0], when: {normaliser.kind: pcxbn}}
  memory.ratio: {uniform: [0.1, 1.0]}
"""
GRID = TOY.split("params:")[0] + "params:\n  normaliser.kind: {grid: [none, xbn]}\n"
DELAY = TOY.split("params:")[0] + "params:\n  normaliser.delay_epochs: {int: [0, 2]}\n"


@pytest.fixture
def space_file(tmp_path):
    def write(text: str = TOY, name: str = "toy"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        return str(path)

    return write


def options(tmp_path, **changes) -> SweepOptions:
    return SweepOptions(storage=str(tmp_path / "sweeps"), dashboard=False, **changes)


# ---- the Optuna bias fix (no Ray needed) ----------------------------------------------------------
def drive(searcher, trial_id: str, epochs: list[int], values: list[float], completed_at=None, error=False):
    """Feed a searcher what Tune would: results it may see, then the completion with the last result."""
    searcher.suggest(trial_id)
    results = [{"epoch": e, "recall_at_1": v, "training_iteration": e} for e, v in zip(epochs, values)]
    for res in results[:-1]:
        searcher.on_trial_result(trial_id, res)
    # the last result was the one the scheduler stopped on (Tune skips on_trial_result then) or the final
    searcher.on_trial_complete(trial_id, None if error else results[-1], error=error)


@pytest.mark.parametrize("cls, early_state", [(PrunedOptunaSearch, TrialState.PRUNED),
                                              (OptunaSearch, TrialState.COMPLETE)])
def test_stopped_trials_reach_optuna_as_pruned(space_file, cls, early_state):
    space = load_space(space_file())
    if cls is PrunedOptunaSearch:
        searcher = PrunedOptunaSearch(space.define_by_run, "recall_at_1", "max", seed=0, budget=3)
    else:  # Ray 2.60's own class: the biased behaviour this project fixes
        searcher = OptunaSearch(space=space.define_by_run, metric="recall_at_1", mode="max", seed=0)
    drive(searcher, "full", [1, 2, 3], [0.2, 0.4, 0.6])
    drive(searcher, "early", [1], [0.5])
    drive(searcher, "crash", [1], [0.1], error=True)
    trials = searcher._ot_study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE, early_state, TrialState.FAIL]
    assert trials[0].value == 0.6
    if cls is PrunedOptunaSearch:
        assert trials[1].intermediate_values == {1: 0.5}  # the rung value, kept out of the finals
        assert trials[1].value == 0.5 and trials[1].last_step == 1


def test_nonfinite_loss_report_is_a_failure_for_optuna(space_file):
    searcher = PrunedOptunaSearch(load_space(space_file()).define_by_run, "recall_at_1", "max", seed=0, budget=3)
    searcher.suggest("nan")
    searcher.on_trial_result("nan", {"epoch": 1, "recall_at_1": 0.3})
    last = {"epoch": 2, "recall_at_1": float("-inf"), "error": "NonFiniteLossError: nan"}
    searcher.on_trial_result("nan", last)
    searcher.on_trial_complete("nan", last)
    (trial,) = searcher._ot_study.get_trials(deepcopy=False)
    assert trial.state == TrialState.FAIL and trial.intermediate_values == {1: 0.3}


def test_warm_start_points_enter_the_define_by_run_study_with_their_rewards(space_file):
    points = [{"normaliser.kind": "pcxbn", "normaliser.lambda_mu": 0.25, "memory.ratio": 0.5},
              {"normaliser.kind": "none", "memory.ratio": 0.9}]
    searcher = PrunedOptunaSearch(load_space(space_file()).define_by_run, "recall_at_1", "max", seed=0,
                                  budget=3, points=points, rewards=[0.7, 0.4])
    trials = searcher._ot_study.get_trials(deepcopy=False)
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    assert [t.params for t in trials] == points and [t.value for t in trials] == [0.7, 0.4]
    config = searcher.suggest("next")  # the next trial is a new one, sampled by TPE
    assert set(config) >= {"normaliser.kind", "memory.ratio"}
    states = [t.state for t in searcher._ot_study.get_trials(deepcopy=False)]
    assert states == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.RUNNING]


def test_fixed_configs_come_in_order_then_finish():
    searcher = FixedConfigs([{"seed": 1}, {"seed": 2}], "recall_at_1", "max")
    assert [searcher.suggest("a"), searcher.suggest("b"), searcher.suggest("c")] == [{"seed": 1}, {"seed": 2},
                                                                                      Searcher.FINISHED]


def test_a_conditional_grid_runs_its_points_as_fixed_configs_num_samples_times(tmp_path, space_file):
    """Bug caught: a conditional grid given to Ray's grid_search (the full product, repeats included), or its fixed
    configs run once each whatever --num-samples, or Tune asked for --num-samples trials in all (Tune's
    num_samples counts a searcher's suggestions: 2 of 6)."""
    text = GRID.replace("normaliser.kind: {grid: [none, xbn]}", "memory.enabled: {grid: [false, true]}\n"
                        "  normaliser.kind: {grid: [none, xbn], when: {memory.enabled: true}}")
    space = load_space(space_file(text, "conditional"))
    searcher, param_space, _ = build_searcher(space, options(tmp_path, search="grid", num_samples=2), 3)
    assert isinstance(searcher, FixedConfigs) and tune_samples(searcher, 2) == 6
    assert param_space == space.base and "normaliser.kind" not in param_space
    suggested = [searcher.suggest(str(i)) for i in range(7)]
    assert suggested[-1] == Searcher.FINISHED and suggested[:3] == suggested[3:6] == space.grid_points()
    assert tune_samples(build_searcher(load_space(space_file(GRID, "plain")), options(tmp_path, search="grid",
                                                                                       num_samples=2), 3)[0], 2) == 2


# ---- registries and checks before Ray ------------------------------------------------------------
def test_every_registry_entry_builds(tmp_path, space_file):
    assert set(SEARCHERS) == {"optuna", "tpe", "gp", "cmaes", "nsga2", "random", "grid"}
    assert set(SCHEDULERS) == {"asha", "hyperband", "fifo", "pbt", "pb2"}
    for search, text in (("optuna", TOY), ("tpe", TOY), ("gp", TOY), ("cmaes", TOY), ("nsga2", TOY), ("random", TOY),
                         ("grid", GRID)):
        space = load_space(space_file(text, search))
        searcher, param_space, _ = build_searcher(space, options(tmp_path, search=search), 3)
        optuna_based = isinstance(searcher, PrunedOptunaSearch)
        assert optuna_based == (search not in ("random", "grid")) and (optuna_based or "normaliser.kind" in param_space)
    # Bug caught: a registry name building another scheduler (e.g. fifo stopping trials early, or asha /
    # hyperband counting Tune's iterations instead of our 1-based epochs, or ignoring the epoch budget).
    built = {name: build_scheduler(options(tmp_path, scheduler=name), 9, {}) for name in SCHEDULERS
             if name not in ("pbt", "pb2")}
    mutable = load_space(space_file(TOY.split("params:")[0] + "params:\n  weight_decay: {loguniform: [1.0e-4, 1.0e-2], "
                                    "mutable: true}\n", "mutable"))
    pbt = build_scheduler(options(tmp_path, scheduler="pbt", search="random", perturbation_interval=3), 9, {}, mutable)
    assert isinstance(pbt, PopulationBasedTraining) and pbt._perturbation_interval == 3 and pbt._time_attr == "epoch"
    assert set(pbt._hyperparam_mutations) == {"weight_decay"}
    pb2 = build_scheduler(options(tmp_path, scheduler="pb2", search="random", perturbation_interval=3), 9, {}, mutable)
    assert isinstance(pb2, PB2) and pb2._perturbation_interval == 3 and pb2._time_attr == "epoch"
    assert pb2._hyperparam_bounds == {"weight_decay": [1e-4, 1e-2]}
    assert type(built["fifo"]) is GuardedFIFO  # no early stopping of its own (only tune.search.guards')
    assert isinstance(built["asha"], AsyncHyperBandScheduler) and isinstance(built["hyperband"], HyperBandScheduler)
    for name in ("asha", "hyperband"):
        assert built[name]._time_attr == "epoch", name
    assert built["asha"]._max_t == 9 and built["hyperband"]._max_t_attr == 9
    asha = build_scheduler(options(tmp_path, grace_period=2, reduction_factor=3), 18, {})
    assert asha._time_attr == "epoch" and [r[0] for r in asha._brackets[0]._rungs] == [18, 6, 2]
    with pytest.raises(SweepInputError, match="--scheduler must be one of"):
        build_scheduler(options(tmp_path, scheduler="median"), 9, {})


BAD_INPUT = {  # case: (options changed, space, error type, what the message must say)
    "search": ({"search": "bayes"}, "toy", SpaceError, "unknown search 'bayes'; valid: optuna, tpe, gp, cmaes, nsga2, random, grid"),
    "grid_optuna": ({"search": "optuna"}, "grid", SpaceError, "search 'optuna' cannot run grid params"),
    "grace": ({"grace_period": 5}, "toy", SweepInputError, "--grace-period must be <= the epoch budget (3), but got 5"),
    "set_key": ({"overrides": {"lr_typo": "1"}}, "toy", SpaceError, "key 'lr_typo': unknown --set key"),
    "set_value": ({"overrides": {"memory.ratio": "2"}}, "toy", SpaceError,
                  "key 'memory.ratio': base value breaks the config's rule: memory.ratio must satisfy 0 < ratio"),
    "warm_random": ({"search": "random", "warm_start": "TMP"}, "toy", SweepInputError,
                    "--warm-start needs --search optuna"),
    "strict": ({"strict": True, "grace_period": 1}, "delay", SweepInputError, "unfair early stopping (--strict)"),
    "options": ({"mode": "maximum"}, "toy", SweepInputError, "--mode must satisfy one of ['max', 'min'], but got 'maximum'"),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_refused_before_anything_is_written(tmp_path, space_file, case):
    """Bug caught: one of prepare()'s checks removed or weakened (the sweep would start, or fail later with
    another error); each case must be refused by its own check, with its own message, before any write."""
    changes, space, error, message = BAD_INPUT[case]
    space = space_file({"toy": TOY, "grid": GRID, "delay": DELAY}[space])
    changes = {k: str(tmp_path) if v == "TMP" else v for k, v in changes.items()}
    with pytest.raises(error) as info:
        prepare(space, options(tmp_path, **changes))
    assert message in str(info.value)
    assert not (tmp_path / "sweeps").exists()


def test_search_and_sample_defaults_follow_the_space(tmp_path, space_file):
    grid = prepare(space_file(GRID), options(tmp_path)).options
    assert (grid.search, grid.num_samples) == ("grid", 1)  # each grid point once, not 20 repeats
    sampled = prepare(space_file(TOY), options(tmp_path)).options
    assert (sampled.search, sampled.num_samples) == ("optuna", 20)
    assert prepare(space_file(GRID), options(tmp_path, num_samples=3)).options.num_samples == 3


def test_fairness_warning_names_the_fair_grace_period(tmp_path, space_file):
    plan = prepare(space_file(DELAY), options(tmp_path, grace_period=1))
    assert any("--grace-period 3" in w for w in plan.warnings)
    assert prepare(space_file(DELAY), options(tmp_path, grace_period=3)).warnings == []
    assert prepare(space_file(DELAY), options(tmp_path, scheduler="fifo")).warnings == []


def test_an_existing_experiment_name_is_refused(tmp_path, space_file):
    (tmp_path / "sweeps" / "taken").mkdir(parents=True)
    with pytest.raises(SweepInputError, match="already exists.*xbm-tune resume"):
        prepare(space_file(), options(tmp_path, name="taken"))


# ---- on Ray ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def asha_sweep(ray_session, tmp_path_factory):
    return run_toy_sweep(tmp_path_factory.mktemp("asha"), "asha", TOY, num_samples=6, grace_period=1,
                         reduction_factor=2, max_concurrent=1, seed=1)


@pytest.mark.slow
def test_asha_optuna_sweep_writes_the_contract_and_prunes_in_optuna(asha_sweep):
    plan, built = asha_sweep
    result = outcome(plan.experiment_uri, "recall_at_1", "max")
    trials = result.trials.set_index("trial_id")
    assert len(trials) == 6 and set(trials.status) <= {"completed", "stopped_early"}
    stopped = trials[trials.status == "stopped_early"]
    assert len(stopped) >= 1 and (trials.status == "completed").sum() >= 1
    assert stopped.stop_reason.str.startswith("asha: recall_at_1=").all()
    assert (trials.loc[trials.status == "completed", "epochs_completed"] == 3).all()
    epochs = pq.read_table(f"{plan.results_uri}/epochs").to_pandas()
    assert len(epochs) == trials.epochs_completed.sum() and not epochs.duplicated(["trial_id", "epoch"]).any()
    pcxbn = trials["config.normaliser.kind"] == "pcxbn"
    assert trials.loc[~pcxbn, "config.normaliser.lambda_mu"].isna().all()  # absent conditional -> null
    assert trials.loc[pcxbn, "config.normaliser.lambda_mu"].notna().all()
    states = [t.state for t in built.searcher._ot_study.get_trials(deepcopy=False)]
    assert states.count(TrialState.PRUNED) == len(stopped)
    assert states.count(TrialState.COMPLETE) == (trials.status == "completed").sum()
    assert result.best()["status"] in ("completed", "stopped_early") and result.exit_code() == 0


@pytest.mark.slow
def test_fixed_configs_join_the_sweep_as_a_confirm_stage(asha_sweep):
    plan, _ = asha_sweep
    before = outcome(plan.experiment_uri, "recall_at_1", "max").trials
    best = before.sort_values("best_recall_at_1").iloc[-1]
    config = {k[len("config."):]: v for k, v in best.items() if k.startswith("config.")}
    config = {k: (None if v != v else v) for k, v in config.items()}  # NaN (absent) -> None
    configs = [{**config, "seed": seed, "epochs": 1} for seed in (11, 12)]
    after = run_configs(configs, SweepOptions(dashboard=False, max_concurrent=1), plan.results_uri).trials
    confirm = after[after.stage == "confirm"]
    assert len(confirm) == 2 and set(confirm.seed) == {11, 12} and (confirm.status == "completed").all()
    assert len(after[after.stage == "sweep"]) == len(before)
    epochs = pq.read_table(f"{plan.results_uri}/epochs").to_pandas()
    assert (epochs.stage == "confirm").sum() == 2


@pytest.mark.slow
def test_run_sweep_with_random_search_and_fifo(ray_session, tmp_path, space_file):
    plan = prepare(space_file(), options(tmp_path, search="random", scheduler="fifo", num_samples=2,
                                         max_epochs=1, name="random", max_concurrent=1))
    result = run_sweep(plan)
    record = (tmp_path / "sweeps" / "random" / "results" / "sweep.json").read_text()
    assert '"search": "random"' in record and "toy sweep for the tests" in record
    assert len(result.trials) == 2 and (result.trials.status == "completed").all()
    assert ray.is_initialized()  # a driver's own Ray (here the test's) is left running


MOCO = TOY.split("params:")[0].replace("lr: 1.0e-3}", "lr: 1.0e-3, objective: moco}") + """params:
  normaliser.kind: {choice: [none, xbn]}
  moco.momentum: {uniform: [0.9, 0.999]}
"""


@pytest.mark.slow
def test_a_label_free_sweep_composes_with_asha_the_contract_and_analysis(ray_session, tmp_path, space_file):
    """Bug caught: a label-free objective's keys lost between the space and the trainer (config.objective or
    config.moco.* missing or constant in Parquet), ASHA unable to stop such trials, or analysis pooling MoCo
    variants with supervised ones."""
    import analysis

    plan = prepare(space_file(MOCO, "moco"), options(tmp_path, num_samples=4, grace_period=1, reduction_factor=2,
                                                     max_concurrent=1, name="moco", seed=3,
                                                     stop_collapsed=False))  # ASHA alone decides here
    run_sweep(plan)
    trials = outcome(plan.experiment_uri, "recall_at_1", "max").trials
    assert set(trials["config.objective"]) == {"moco"} and trials["config.moco.momentum"].nunique() == 4
    assert (trials.status == "stopped_early").sum() >= 1 and (trials.status == "completed").sum() >= 1
    sweep = analysis.load(str(tmp_path / "sweeps" / "moco"))
    assert set(sweep.trials["variant"]) <= {"moco:none", "moco:xbn"} and len(sweep.trials) == 4


def test_a_confirm_reruns_each_config_with_its_own_workers(tmp_path, ray_down):
    """Bug caught (issue 20): ``confirm --gpus-per-trial 2`` on a one-worker sweep (or 1 on a two-worker one)
    rerunning a config as another data-parallel run than the one the sweep measured; refused before Ray."""
    two = {"dataset": "toy", "model": "mlp", "batch_size": 16, "samples_per_class": 4, "workers": 2}
    with pytest.raises(SweepInputError, match=r"give the 2 worker\(s\) the config ran with \(workers=2\), but give 1"):
        run_configs([two], SweepOptions(), str(tmp_path / "sweep" / "results"))
    with pytest.raises(SweepInputError, match=r"give the 1 worker\(s\).*but give 2"):
        run_configs([{**two, "workers": 1}], SweepOptions(gpus_per_trial=2.0), str(tmp_path / "sweep" / "results"))
    assert not ray.is_initialized()


@pytest.mark.parametrize("started", [True, False])
def test_resume_judges_multi_worker_trials_against_the_ray_it_runs_on(monkeypatch, started):
    """Bug caught: resume decided whether a never-fitting multi-worker trial is refused from the address
    sweep.json recorded, not the Ray it runs on: a submitted sweep (recorded --address auto) resumed on a
    laptop hung silently, and a local one resumed on an autoscaling cluster was refused."""
    from contextlib import contextmanager
    from types import SimpleNamespace

    from tune.driver import sweep
    from tune.driver.options import SweepOptions

    options = SweepOptions(workers_per_trial=2, cpus_per_trial=1.0, address="auto", scheduler="fifo",
                           search="random", num_samples=1)
    record = SimpleNamespace(options=options.to_dict(), space=SimpleNamespace(base={}, params={}), swept=(),
                             max_epochs=2, experiment="e", metric="recall_at_1", mode="max")
    monkeypatch.setattr(sweep, "read_record", lambda uri: record)
    monkeypatch.setattr(sweep.ray_tune.Tuner, "can_restore", lambda uri: True)
    for name in ("relocated", "check_data", "record_paths"):
        monkeypatch.setattr(sweep, name, lambda *a: {})

    @contextmanager
    def session(address, dashboard, **kwargs):
        yield SimpleNamespace(started=started)

    judged = []

    def resolved(opts, own_ray=False):
        judged.append(own_ray)
        raise KeyboardInterrupt  # enough: stop before Tune

    monkeypatch.setattr(sweep, "ray_session", session)
    monkeypatch.setattr(sweep, "resolved_resources", resolved)
    with pytest.raises(KeyboardInterrupt):
        sweep.resume_sweep("/tmp/nowhere")
    assert judged == [started]
