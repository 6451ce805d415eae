"""Every registry's names are defined once, in the torch-free vocabulary (xbm.config, xbm.normalisers.config),
and each registry of builders holds exactly those names, in that order."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import xbm.config as config
import xbm.normalisers.config as normaliser_config

ROOT = Path(__file__).resolve().parents[2]


def registries():
    from xbm.data.augment import PRESETS
    from xbm.losses.criteria import DISTANCES
    from xbm.losses.kinds import LOSS_DISTANCES, LOSSES
    from xbm.normalisers.registry import NORMALISERS
    from xbm.objectives.registry import REGISTRY
    from xbm.training import optim

    return {"optimizer": (optim.OPTIMIZERS, config.OPTIMIZERS), "schedule": (optim.SCHEDULES, config.SCHEDULES),
            "loss.kind": (LOSSES, config.LOSS_KINDS), "loss.distance": (LOSS_DISTANCES, config.LOSS_DISTANCES),
            "miner.distance": (DISTANCES, config.MINER_DISTANCES), "objective": (REGISTRY, config.OBJECTIVES),
            "normaliser.kind": (NORMALISERS, normaliser_config.KINDS),
            "augment": (("auto", *PRESETS), config.AUGMENT)}


@pytest.mark.parametrize("key", sorted(registries()))
def test_each_registry_holds_the_names_the_config_accepts(key):
    """Bug caught: a builder added to a registry but not to the config's list (the config refuses a value that
    would train), or a name the config accepts with no builder (a run that fails after the sweep started)."""
    built, named = registries()[key]
    assert tuple(built) == tuple(named)


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
