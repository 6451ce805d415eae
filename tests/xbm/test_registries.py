"""Every registry is one torch-free table (xbm.registries): each name resolves to a builder, the config validates
against the same table, and no list of names is written twice."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import xbm.registries as registries
from xbm.registries import Registry

ROOT = Path(__file__).resolve().parents[2]
TABLES = {name: table for name, table in vars(registries).items() if isinstance(table, Registry)}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_name_of_a_registry_resolves_to_a_builder(name):
    """Bug caught: a name the config accepts whose builder was renamed or moved (the config validates a value, the
    run fails when it builds it, after the sweep started)."""
    table = TABLES[name]
    for key in table:
        assert callable(table[key]), f"{name}[{key!r}] -> {table.where(key)} is not callable"


def test_a_name_outside_a_registry_is_refused_naming_the_key_and_the_choices():
    """Bug caught: a bare KeyError (or a silent default) for a typo in a builder's name."""
    with pytest.raises(ValueError, match=r"loss.kind must be one of \['supcon', .*but got 'supconn'"):
        registries.LOSSES.build("supconn")
    with pytest.raises(KeyError):
        registries.LOSSES["supconn"]


def test_the_config_validates_each_choice_against_its_registry():
    """Bug caught: a config check reading a list of its own again (a name added to the registry then refused)."""
    from xbm.config import TrainConfig

    for key, table in (("optimizer", registries.OPTIMIZERS), ("objective", registries.OBJECTIVES),
                       ("loss.kind", registries.LOSSES), ("loss.distance", registries.LOSS_DISTANCES),
                       ("miner.distance", registries.MINER_DISTANCES), ("normaliser.kind", registries.NORMALISERS),
                       ("augment", registries.AUGMENTS)):
        with pytest.raises(ValueError, match=key.split(".")[-1]):
            TrainConfig.from_dict({key: "no-such-name"})
        assert "no-such-name" not in table


def test_each_augment_preset_is_named_as_its_registry_entry():
    """Bug caught: an ``augment`` name building another preset (its class's own ``name`` differs)."""
    for name in registries.AUGMENTS:
        assert registries.AUGMENTS[name].name == name


# module-level names that each data set module defines for itself (equal values are a coincidence of papers)
PER_DATA_SET = {"LAYOUT", "NUM_TRAIN_CLASSES", "RECALL_KS"}


def test_no_list_of_names_is_defined_in_two_modules():
    """Bug caught: a list copied into a second module, under its own name or another (as SCHEDULES, AUGMENT,
    the finished statuses and the bad-image choices were), which then drifts from the first."""
    homes = defaultdict(list)
    for package in ("xbm", "tune", "analysis"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, (ast.Tuple, ast.List,
                                                                                           ast.Set, ast.Dict)):
                    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        if isinstance(target, ast.Name) and target.id.isupper() and target.id not in PER_DATA_SET:
                            homes[ast.unparse(node.value)].append(f"{path.relative_to(ROOT)}:{target.id}")
    twice = {value: places for value, places in homes.items() if len(places) > 1}
    assert twice == {}
