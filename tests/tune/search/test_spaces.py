"""tune/search/spaces: validation errors (file, key, rule, value), conversion for Optuna and Ray, resolve, fairness."""
from __future__ import annotations

import textwrap
from pathlib import Path

import optuna
import pytest

from tune.search.spaces import SPACES_DIR, SpaceError, drop_absent, load_space, pin_space
from xbm.config import TrainConfig

optuna.logging.set_verbosity(optuna.logging.WARNING)

VALID = """
description: test space
base:
  dataset: toy
  model: mlp
params:
  normaliser.kind: {choice: [none, xbn, pcxbn]}
  normaliser.lambda_mu: {uniform: [0.0, 1.0], when: {normaliser.kind: pcxbn}}
  memory.ratio: {loguniform: [0.05, 1.0]}
"""


def write(tmp_path, text: str, name: str = "space.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def params_yaml(params: str, base: str = "dataset: toy") -> str:
    return f"description: t\nbase:\n  {base}\nparams:\n" + textwrap.indent(textwrap.dedent(params), "  ")


# (params block, base line, key the error names, fragments: rule and value)
ERRORS = {
    "unknown param key": ("normaliser.lamda_mu: {uniform: [0, 1]}", "dataset: toy", "normaliser.lamda_mu",
                          ["unknown params key", "did you mean normaliser.lambda_mu"]),
    "unknown base key": ("lr: {loguniform: [1.0e-4, 1.0e-2]}", "datasett: toy", "datasett",
                         ["unknown base key", "did you mean dataset"]),
    "lo not below hi": ("normaliser.lambda_mu: {uniform: [0.8, 0.2]}", "dataset: toy", "normaliser.lambda_mu",
                        ["lo < hi", "[0.8, 0.2]"]),
    "loguniform at zero": ("normaliser.kalman_r: {loguniform: [0.0, 1.0]}", "dataset: toy", "normaliser.kalman_r",
                           ["lo > 0", "lo=0.0"]),
    "lambda above one": ("normaliser.lambda_mu: {uniform: [0.0, 1.5]}", "dataset: toy", "normaliser.lambda_mu",
                         ["0 <= lambda_mu <= 1", "1.5"]),
    "negative r": ("normaliser.kalman_r: {uniform: [-1.0, 1.0]}", "dataset: toy", "normaliser.kalman_r",
                   [">= 0", "-1.0"]),
    "ratio zero": ("memory.ratio: {uniform: [0.0, 1.0]}", "dataset: toy", "memory.ratio",
                   ["0 < ratio <= 1", "0.0"]),
    "unknown kind in choice": ("normaliser.kind: {choice: [xbn, pcbxn]}", "dataset: toy", "normaliser.kind",
                               ["one of", "'pcbxn'"]),
    "unknown kind in base": ("memory.ratio: {uniform: [0.1, 1.0]}", "normaliser.kind: xbnn", "normaliser.kind",
                             ["one of", "'xbnn'"]),
    "when on unknown key": ("normaliser.kalman_r: {loguniform: [1.0e-3, 1.0], when: {normaliser.knd: axbn}}",
                            "dataset: toy", "normaliser.knd", ["unknown 'when'", "did you mean normaliser.kind"]),
    "when never holds": ("normaliser.kind: {choice: [none, xbn]}\n"
                         "normaliser.kalman_r: {loguniform: [1.0e-3, 1.0], when: {normaliser.kind: axbn}}",
                         "dataset: toy", "normaliser.kalman_r", ["can never hold", "['none', 'xbn']"]),
    "when on fixed key never holds": ("normaliser.kalman_r: {loguniform: [1.0e-3, 1.0], when: {normaliser.kind: axbn}}",
                                      "normaliser.kind: xbn", "normaliser.kalman_r", ["can never hold", "['xbn']"]),
    "unknown distribution": ("lr: {normal: [0.1, 0.2]}", "dataset: toy", "lr",
                             ["unknown distribution 'normal'", "uniform, loguniform, int, choice, grid"]),
    "two distributions": ("lr: {uniform: [0.1, 0.2], loguniform: [0.1, 0.2]}", "dataset: toy", "lr",
                          ["exactly one distribution", "['uniform', 'loguniform']"]),
    "key in base and params": ("lr: {uniform: [0.1, 0.2]}", "lr: 0.1", "lr", ["both in base and in params"]),
    "uniform on an int key": ("epochs: {uniform: [1, 10]}", "dataset: toy", "epochs",
                              ["draws floats", "type int", "use int", "uniform [1, 10]"]),
    "when cycle": ("normaliser.kind: {choice: [xbn, pcxbn], when: {miner.distance: lp}}\n"
                   "miner.distance: {choice: [lp, cosine], when: {normaliser.kind: xbn}}",
                   "dataset: toy", "normaliser.kind",
                   ["cycle", "normaliser.kind -> miner.distance -> normaliser.kind"]),
    "when on a continuous param": ("memory.ratio: {uniform: [0.1, 1.0]}\n"
                                   "lr: {loguniform: [1.0e-4, 1.0e-2], when: {memory.ratio: 0.5}}",
                                   "dataset: toy", "lr", ["choice/grid params only", "uniform [0.1, 1]"]),
    "overlapping branches": ("miner.pos_margin:\n  - {uniform: [0.0, 0.5], when: {miner.distance: [lp, cosine]}}\n"
                             "  - {uniform: [0.5, 1.0], when: {miner.distance: cosine}}",
                             "dataset: toy", "miner.pos_margin", ["can both hold", "exclude each other"]),
    "bad base type": ("lr: {uniform: [0.1, 0.2]}", "epochs: ten", "epochs", ["type int", "'ten'"]),
    "yaml boolean for a word": ("lr: {uniform: [0.1, 0.2]}", "amp: off", "amp", ["type str", "quote the word"]),
    "grid value breaks a cross rule": ("batch_size: {grid: [16, 30]}", "samples_per_class: 4", "batch_size",
                                       ["grid value 30", "multiple of samples_per_class=4"]),
    "grid point breaks a cross rule": ("batch_size: {grid: [16, 20]}\nsamples_per_class: {grid: [4, 8]}",
                                       "dataset: toy", "batch_size",
                                       ["grid point {'batch_size': 20, 'samples_per_class': 8}",
                                        "multiple of samples_per_class=8"]),
    "fixed value as param": ("lr: 0.1", "dataset: toy", "lr", ["needs a distribution", "under base"]),
    "int with a float bound": ("epochs: {int: [1, 2.5]}", "dataset: toy", "epochs", ["integer", "2.5"]),
    "empty choice": ("normaliser.kind: {choice: []}", "dataset: toy", "normaliser.kind", ["non-empty list"]),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_error_names_file_key_rule_and_value(tmp_path, case):
    params, base, key, fragments = ERRORS[case]
    path = write(tmp_path, params_yaml(params, base))
    with pytest.raises(SpaceError) as info:
        load_space(path)
    message = str(info.value)
    assert str(path) in message and f"key {key!r}" in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert info.value.key == key and isinstance(info.value, ValueError)


def test_duplicated_key_names_both_lines(tmp_path):
    path = write(tmp_path, "base:\n  dataset: toy\nparams:\n  lr: {uniform: [0.1, 0.2]}\n  lr: {uniform: [0.2, 0.3]}\n")
    with pytest.raises(SpaceError, match=r"key 'lr': key is duplicated \(lines 4 and 5\)"):
        load_space(path)


@pytest.mark.parametrize("text, fragment", [
    ("base: [1, 2]\n", "base"),
    ("params:\n  lr: {uniform: [0.1, 0.2]}\nsearch: optuna\n", "unknown section"),
    ("base: {dataset: toy\n", "not valid YAML"),
])
def test_shape_errors(tmp_path, text, fragment):
    path = write(tmp_path, text)
    with pytest.raises(SpaceError, match=fragment) as info:
        load_space(path)
    assert str(path) in str(info.value)


def test_unknown_name_suggests_close_shipped_names():
    with pytest.raises(SpaceError, match="did you mean quickstart"):
        load_space("quikstart")
    with pytest.raises(SpaceError, match="no such file"):
        load_space("/nonexistent/space.yaml")


def test_check_search_rules(tmp_path):
    mixed = load_space(write(tmp_path, params_yaml("lr: {loguniform: [1.0e-4, 1.0e-2]}\n"
                                                   "normaliser.kind: {grid: [xbn, axbn]}")))
    mixed.check_search("random")  # grid x random draws: fine
    with pytest.raises(SpaceError, match="search 'optuna' cannot run grid params"):
        mixed.check_search("optuna")
    with pytest.raises(SpaceError, match="search 'grid' needs every param to be a grid, but lr is loguniform"):
        mixed.check_search("grid")
    with pytest.raises(SpaceError, match="unknown search 'bayes'; valid: optuna, tpe, gp, cmaes, nsga2, random, grid"):
        mixed.check_search("bayes")
    grid = load_space("variants")
    assert grid.is_grid and not mixed.is_grid
    grid.check_search("grid")


def test_grid_size():
    assert load_space("variants").grid_size() == 6 * 2 * 2
    assert load_space("pcxbn_lambdas").grid_size() == 36
    assert load_space("quickstart").grid_size() == 1


def test_define_by_run_suggests_conditional_params_only_when_their_condition_holds(tmp_path):
    space = load_space(write(tmp_path, VALID))
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=0))
    for kind in ("none", "pcxbn", "xbn", "pcxbn"):
        study.enqueue_trial({"normaliser.kind": kind})
    for kind in ("none", "pcxbn", "xbn", "pcxbn"):
        trial = study.ask()
        constants = space.define_by_run(trial)
        assert constants == {"dataset": "toy", "model": "mlp"}
        assert trial.params["normaliser.kind"] == kind
        assert ("normaliser.lambda_mu" in trial.params) == (kind == "pcxbn")
        assert 0.05 <= trial.params["memory.ratio"] <= 1.0
        TrainConfig.from_dict({**constants, **trial.params})
        study.tell(trial, 0.5)


def test_define_by_run_uses_the_branch_of_the_active_condition():
    space = load_space("miner_margins")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for i in range(12):
        trial = study.ask()
        space.define_by_run(trial)
        distance, pos = trial.params["miner.distance"], trial.params["miner.pos_margin"]
        assert (0.5 <= pos <= 1.0) if distance == "cosine" else (0.0 <= pos <= 0.8)
        study.tell(trial, float(i))


def _ray_configs(param_space: dict, n: int, seed: int = 0) -> list[dict]:
    from ray.tune.experiment import Experiment
    from ray.tune.search.basic_variant import BasicVariantGenerator

    generator = BasicVariantGenerator(random_state=seed)
    generator.add_configurations([Experiment("t", lambda config: None, config=param_space, num_samples=n)])
    return [generator.next_trial().config for _ in range(n)]


def test_random_param_space_gives_none_for_absent_params(tmp_path):
    space = load_space(write(tmp_path, VALID))
    configs = _ray_configs(space.to_param_space(seed=3), 24)
    kinds = {c["normaliser.kind"] for c in configs}
    assert kinds == {"none", "xbn", "pcxbn"}
    for config in configs:
        lam = config["normaliser.lambda_mu"]
        assert (lam is not None) == (config["normaliser.kind"] == "pcxbn")
        assert lam is None or 0.0 <= lam <= 1.0
        assert space.resolve(config) == drop_absent(config)
        TrainConfig.from_dict(drop_absent(config))
    again = _ray_configs(load_space(write(tmp_path, VALID)).to_param_space(seed=3), 24)
    assert [c["normaliser.lambda_mu"] for c in again] == [c["normaliser.lambda_mu"] for c in configs]


def test_grid_param_space_enumerates_every_point():
    space = load_space("variants")
    configs = _ray_configs(space.to_param_space(), space.grid_size())
    points = {(c["normaliser.kind"], c["normaliser.centre_only"], c["normaliser.unit_norm"]) for c in configs}
    assert len(points) == 24 and all(c["dataset"] == "sop" for c in configs)


def test_resolve_drops_params_whose_condition_is_off(tmp_path):
    space = load_space(write(tmp_path, VALID))
    sampled = {"normaliser.kind": "xbn", "normaliser.lambda_mu": 0.3, "memory.ratio": 0.5}
    assert space.resolve(sampled) == {"dataset": "toy", "model": "mlp", "normaliser.kind": "xbn", "memory.ratio": 0.5}
    sampled["normaliser.kind"] = "pcxbn"
    assert space.resolve(sampled)["normaliser.lambda_mu"] == 0.3
    assert "normaliser.lambda_mu" not in space.resolve({"normaliser.kind": "pcxbn", "normaliser.lambda_mu": None})


def test_overrides_pin_params_and_drop_unreachable_branches():
    space = load_space("quickstart", overrides={"normaliser.kind": "xbn", "epochs": "3"})
    assert space.base["normaliser.kind"] == "xbn" and space.base["epochs"] == 3
    assert set(space.params) == {"memory.ratio"} and space.overrides == {"normaliser.kind": "xbn", "epochs": "3"}
    kept = load_space("quickstart", overrides={"normaliser.kind": "pcxbn"})
    assert set(kept.params) == {"normaliser.lambda_mu", "memory.ratio"}
    assert kept.resolve({"normaliser.lambda_mu": 0.2})["normaliser.lambda_mu"] == 0.2
    with pytest.raises(SpaceError, match="did you mean epochs"):
        load_space("quickstart", overrides={"epochz": 3})
    with pytest.raises(SpaceError, match="0 <= val_fraction < 1"):
        load_space("quickstart", overrides={"val_fraction": 1.5})


CONDITIONAL_GRID = """description: a conditional grid
base: {dataset: toy, model: mlp, batch_size: 16, samples_per_class: 4}
params:
  seed: {grid: [0, 1]}
  memory.enabled: {grid: [false, true]}
  normaliser.kind: {grid: [none, xbn], when: {memory.enabled: true}}
"""


def test_a_conditional_grid_runs_each_point_once_where_its_condition_holds(tmp_path):
    """Bug caught: a grid param with ``when`` enumerated as the full product (8 trials, the no-memory run twice,
    once labelled xbn) or drawn at random under ``--search random`` instead of enumerated. By hand: 2 seeds x
    (no memory, memory with none, memory with xbn) = 6 points, normaliser.kind absent (None) without memory."""
    space = load_space(write(tmp_path, CONDITIONAL_GRID))
    assert space.conditional_grid and space.grid_size() == 6
    assert space.grid_points() == [
        {"seed": seed, "memory.enabled": enabled, "normaliser.kind": kind}
        for seed in (0, 1) for enabled, kind in ((False, None), (True, "none"), (True, "xbn"))]
    space.check_search("grid")
    with pytest.raises(SpaceError, match="enumerated by --search grid only"):
        space.check_search("random")
    plain = load_space(write(tmp_path, CONDITIONAL_GRID.replace(", when: {memory.enabled: true}", ""), "plain.yaml"))
    assert not plain.conditional_grid and plain.grid_size() == 8
    smoke = load_space(write(tmp_path, CONDITIONAL_GRID + "smoke:\n  normaliser.kind: {grid: [xbn]}\n", "s.yaml"),
                       smoke=True)
    assert smoke.grid_size() == 4 and smoke.params["normaliser.kind"].is_conditional  # the smoke grid keeps `when`


def test_pinning_a_loaded_space_equals_loading_it_pinned_and_reads_no_file(tmp_path):
    """Bug caught: ``prepare`` pinning ``--set`` values, the seed and the workers on a space it already read
    giving another space than one load with them all (a branch kept that the pins make unreachable, an
    override lost between the pins), or reading the file again (a file edited or removed mid-``prepare``)."""
    path = write(tmp_path, (Path(SPACES_DIR) / "quickstart.yaml").read_text(), "quick.yaml")
    once = load_space(path, overrides={"normaliser.kind": "pcxbn", "epochs": 3, "seed": 7})
    loaded = load_space(path)
    path.unlink()
    twice = pin_space(pin_space(loaded, {"normaliser.kind": "pcxbn", "epochs": 3}), {"seed": 7})
    assert twice.base == once.base and twice.overrides == once.overrides == {"normaliser.kind": "pcxbn", "epochs": 3,
                                                                             "seed": 7}
    assert list(twice.params) == list(once.params) == ["normaliser.lambda_mu", "memory.ratio"]
    assert twice.text == once.text and twice.name == "quick"
    with pytest.raises(SpaceError, match="did you mean epochs"):
        pin_space(loaded, {"epochz": 3})


def test_fairness_warnings_for_swept_start_epochs():
    space = load_space("delay")  # delay_epochs grid up to 20, epochs default 50
    warnings = space.fairness_warnings(grace_period=5, scheduler="asha")
    assert len(warnings) == 1 and "--grace-period 21" in warnings[0] and "normaliser.delay_epochs" in warnings[0]
    assert space.fairness_warnings(grace_period=21, scheduler="asha") == []
    assert space.fairness_warnings(grace_period=1, scheduler="fifo") == []
    hyperband = space.fairness_warnings(grace_period=1, scheduler="hyperband")
    assert len(hyperband) == 1 and "--scheduler asha --grace-period 21" in hyperband[0]
    short = load_space("delay", overrides={"epochs": 10})
    messages = short.fairness_warnings(grace_period=30, scheduler="hyperband")
    assert len(messages) == 1 and "never runs" in messages[0]
    assert load_space("quickstart").fairness_warnings(grace_period=1, scheduler="asha") == []


def test_describe_lists_base_params_and_searches():
    text = load_space("quickstart").describe()
    for fragment in ("space: quickstart", "dataset = 'toy'", "normaliser.lambda_mu", "when normaliser.kind == 'pcxbn'",
                     "searches: optuna, tpe, gp, cmaes, nsga2, random"):
        assert fragment in text


def test_param_exposes_kind_args_and_when():
    param = load_space("quickstart").params["normaliser.lambda_mu"]
    assert (param.kind, param.args, dict(param.when)) == ("uniform", [0.0, 1.0], {"normaliser.kind": ("pcxbn",)})


def test_numeric_strings_in_bounds_and_choices_are_coerced(tmp_path):
    # PyYAML reads 1e-4 (no dot) as a string; choice values take the key's type.
    space = load_space(write(tmp_path, params_yaml("lr: {loguniform: [1e-4, 1e-2]}\nbatch_size: {choice: ['32', 64]}")))
    assert space.params["lr"].args == [1e-4, 1e-2]
    assert space.params["batch_size"].args == [32, 64]


CHAIN = """
description: a condition on a conditional param
base: {dataset: toy}
params:
  normaliser.kind: {choice: [none, pcxbn]}
  normaliser.absent: {choice: [global, skip], when: {normaliser.kind: pcxbn}}
  normaliser.lambda_sigma: {uniform: [0.0, 1.0], when: {normaliser.absent: global}}
"""


def test_a_param_conditioned_on_an_absent_param_is_absent(tmp_path):
    # normaliser.absent defaults to "global", but when it does not exist its default must not count
    space = load_space(write(tmp_path, CHAIN))
    assert list(space.params) == ["normaliser.kind", "normaliser.absent", "normaliser.lambda_sigma"]
    assert space.resolve({"normaliser.kind": "none", "normaliser.lambda_sigma": 0.5}) == {
        "dataset": "toy", "normaliser.kind": "none"}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial({"normaliser.kind": "none"})
    study.enqueue_trial({"normaliser.kind": "pcxbn", "normaliser.absent": "global"})
    first, second = study.ask(), study.ask()
    space.define_by_run(first)
    space.define_by_run(second)
    assert first.params == {"normaliser.kind": "none"}
    assert set(second.params) == {"normaliser.kind", "normaliser.absent", "normaliser.lambda_sigma"}
    for config in _ray_configs(space.to_param_space(seed=0), 16):
        exists = config["normaliser.kind"] == "pcxbn" and config["normaliser.absent"] == "global"
        assert (config["normaliser.lambda_sigma"] is not None) == exists
        assert (config["normaliser.absent"] is not None) == (config["normaliser.kind"] == "pcxbn")


@pytest.mark.parametrize("value", ["1,3", "[1,3]", "[1, 3]"])
def test_a_set_list_value_takes_commas_or_brackets(value):
    """Bug caught (issue 32 item 7): ``xbm-tune sweep --set eval_ks=[1,3]`` refused as not a comma-separated
    list, and ``loss.kind=multi_similarity`` alone refused for the default miner (now ``auto``)."""
    space = load_space("quickstart", overrides={"eval_ks": value, "loss.kind": "multi_similarity"})
    assert space.base["eval_ks"] == "1,3"
    assert TrainConfig.from_dict(space.resolve({})).miner.kind == "none"


def test_a_space_sweeps_the_sampler_and_vehicleid_s_test_lists(tmp_path):
    """Bug caught: the sampler or VehicleID's test list unreachable from a space (XBM Fig. 6's shuffled batches,
    Table 1's three VehicleID columns), a batch size only sampler=random allows refused under it, or a test list
    the release does not ship accepted before Ray starts."""
    text = params_yaml("sampler: {grid: [m_per_class, random]}\nvehicleid_test_size: {grid: [800, 1600, 2400]}",
                       "dataset: vehicleid")
    space = load_space(write(tmp_path, text))
    assert space.params["sampler"].possible_values() == ["m_per_class", "random"]
    assert space.params["vehicleid_test_size"].possible_values() == [800, 1600, 2400]
    load_space(write(tmp_path, params_yaml("batch_size: {grid: [16, 30]}", "sampler: random"), "random.yaml"))
    with pytest.raises(SpaceError, match="vehicleid_test_size"):
        load_space(write(tmp_path, params_yaml("vehicleid_test_size: {choice: [800, 1000]}"), "bad.yaml"))


def test_a_space_sweeps_the_memory_warm_start_and_update(tmp_path):
    """Bug caught: memory.prefill or memory.update unreachable from a space, or an indexed memory with another
    memory.ratio (refused by TrainConfig) accepted before Ray starts, to fail in every such trial."""
    text = params_yaml("memory.prefill: {grid: [false, true]}\nmemory.update: {grid: [ring, indexed]}",
                       "memory.ratio: 1.0")
    space = load_space(write(tmp_path, text))
    assert space.params["memory.prefill"].possible_values() == [False, True]
    assert space.params["memory.update"].possible_values() == ["ring", "indexed"]
    with pytest.raises(SpaceError, match="memory.ratio"):
        load_space(write(tmp_path, params_yaml("memory.update: {choice: [ring, indexed]}", "memory.ratio: 0.5"),
                         "bad.yaml"))
