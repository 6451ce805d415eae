"""tune/search/spaces/combinations.py: cross rules between two swept keys (``min_lr <= lr`` under cosine,
``batch_size`` a multiple of ``samples_per_class``), judged over the swept values, not the unused defaults."""
from __future__ import annotations

import itertools

import pytest

from tune.cli import main
from tune.driver.options import SweepOptions
from tune.driver.plan import prepare
from tune.search.spaces import SpaceError, combinations as combinations_module, load_space
from tune.search.spaces.combinations import MAX_COMBINATIONS, combinations

from .test_spaces import params_yaml, write

COSINE = "dataset: toy\n  model: mlp\n  schedule: cosine"


def test_a_space_whose_every_combination_holds_loads_without_a_warning(tmp_path):
    """Bug caught: a swept value judged against the other swept key's default, which no trial uses:
    min_lr 1e-3 refused beside the default lr 1e-4 although lr is swept over [1e-3, 1e-1]."""
    space = load_space(write(tmp_path, params_yaml("lr: {loguniform: [1.0e-3, 1.0e-1]}\n"
                                                   "min_lr: {loguniform: [1.0e-5, 1.0e-3]}", COSINE)))
    assert list(space.params) == ["lr", "min_lr"]
    assert space.combination_warning() is None


def test_a_value_no_combination_admits_is_still_refused(tmp_path):
    """Bug caught: the search over the other keys' values accepting a value that breaks the rule beside
    every one of them (min_lr 1e-2 is above every lr of [1e-4, 1e-3])."""
    path = write(tmp_path, params_yaml("lr: {loguniform: [1.0e-4, 1.0e-3]}\n"
                                       "min_lr: {loguniform: [1.0e-2, 1.0e-1]}", COSINE))
    with pytest.raises(SpaceError) as info:
        load_space(path)
    assert info.value.key == "min_lr"
    assert "loguniform value 0.01 breaks the config's rule" in str(info.value)
    assert "nor beside any bound or choice of lr" in str(info.value)


def test_the_combinations_that_break_a_rule_are_counted_and_one_is_shown(tmp_path, capsys):
    """Bug caught: a sweep that silently spends trials on refused configs. Of the four corners of
    lr [1e-4, 1e-2] x min_lr [1e-5, 1e-3], only (1e-4, 1e-3) has min_lr above lr."""
    space = load_space(write(tmp_path, params_yaml("lr: {loguniform: [1.0e-4, 1.0e-2]}\n"
                                                   "min_lr: {loguniform: [1.0e-5, 1.0e-3]}", COSINE)))
    warning = space.combination_warning()
    assert warning.startswith("1 of the 4 combinations")
    assert "{'lr': 0.0001, 'min_lr': 0.001}" in warning and "config refused (see error)" in warning
    plan = prepare(str(space.path), SweepOptions(storage=str(tmp_path / "s"), dashboard=False))
    assert warning in plan.warnings  # printed by `xbm-tune sweep` and kept in sweep.json
    assert main(["show-space", str(space.path)]) == 0
    assert f"warning: {warning}" in capsys.readouterr().err


def test_a_conditional_value_is_judged_with_its_condition_held_and_the_others_swept(tmp_path):
    """Bug caught: the condition's witness (schedule = cosine) replaced by another of its values while
    looking for a combination, which would admit min_lr 0.5 under the step schedule where it means nothing;
    or the free lr left at its default, refusing min_lr 0.05 that lr 0.1 admits."""
    good = ("schedule: {choice: [step, cosine]}\nlr: {loguniform: [1.0e-3, 1.0e-1]}\n"
            "min_lr: {uniform: [0.0, 0.05], when: {schedule: cosine}}")
    assert list(load_space(write(tmp_path, params_yaml(good, "dataset: toy"))).params)[-1] == "min_lr"
    bad = good.replace("[0.0, 0.05]", "[0.0, 0.5]")
    with pytest.raises(SpaceError, match="uniform value 0.5 breaks"):
        load_space(write(tmp_path, params_yaml(bad, "dataset: toy"), "bad.yaml"))


def test_a_mixed_space_with_a_bad_grid_and_choice_pair_warns_and_a_grid_only_one_is_refused(tmp_path):
    """Bug caught: every grid point is a trial, so a grid-only space with a refused point must fail before
    Ray starts, while grid x random draws only lose the draws that break the rule."""
    mixed = load_space(write(tmp_path, params_yaml("batch_size: {grid: [16, 30]}\n"
                                                   "samples_per_class: {choice: [4, 5]}")))
    assert mixed.combination_warning().startswith("2 of the 4 combinations")
    with pytest.raises(SpaceError, match=r"grid point \{'batch_size': 16, 'samples_per_class': 5\}"):
        load_space(write(tmp_path, params_yaml("batch_size: {grid: [16, 30]}\nsamples_per_class: {grid: [4, 5]}"),
                         "grid.yaml"))


def test_beyond_the_limit_a_fixed_sample_of_combinations_is_judged(monkeypatch):
    """Bug caught: validation enumerating a product of millions of combinations (minutes before any
    sweep), or a sample that changes between two loads of one space."""
    values = {f"k{i}": [0, 1, 2, 3] for i in range(8)}  # 65,536 combinations
    points, total = combinations(values)
    points = list(points)
    assert total == 4**8 and len(points) == MAX_COMBINATIONS
    assert points == list(combinations(values)[0])
    assert all(set(p) == set(values) and all(v in values[k] for k, v in p.items()) for p in points)
    small = {"a": [1, 2], "b": [3, 4, 5]}
    assert [tuple(p.values()) for p in combinations(small)[0]] == list(itertools.product([1, 2], [3, 4, 5]))
    monkeypatch.setattr(combinations_module, "MAX_COMBINATIONS", 5)
    assert len(list(combinations(small)[0])) == 5 and combinations(small)[1] == 6
