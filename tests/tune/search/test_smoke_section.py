"""A space's ``smoke:`` section (tune.search.spaces.schema / loader, tune.driver.options.smoke_options): what
``--smoke-test`` runs instead of the toy data set, for a study whose smoke test must keep its data and its
comparison."""
from __future__ import annotations

import pytest

from tune.driver.options import SMOKE_OVERRIDES, SweepOptions, smoke_options
from tune.search.spaces import SpaceError, load_space

STUDY = """description: a study
base: {dataset: omniglot, epochs: 8, model: resnet10t, samples_per_class: 4}
params:
  batch_size: {grid: [16, 32, 64, 128]}
  memory.enabled: {grid: [false, true]}
  seed: {grid: [0, 1, 2]}
smoke:
  model: mlp
  batch_size: {grid: [16, 32]}
  seed: {grid: [0, 1]}
  embedding_size: 16
"""


def write(tmp_path, text: str):
    path = tmp_path / "study.yaml"
    path.write_text(text)
    return path


def test_smoke_reduces_the_grid_and_pins_keys_only_when_asked(tmp_path):
    """Bugs caught: the smoke section applied to a real sweep (a study run at toy sizes), a smoke grid not replacing
    the param's values (the full grid in CI), a pinned key left swept, or --set losing to the smoke section."""
    path = write(tmp_path, STUDY)
    full = load_space(path)
    assert full.grid_size() == 24 and full.base["model"] == "resnet10t" and "embedding_size" not in full.base
    smoke = load_space(path, smoke=True)
    assert smoke.grid_size() == 2 * 2 * 2 and smoke.base["model"] == "mlp" and smoke.base["embedding_size"] == 16
    assert smoke.base["dataset"] == "omniglot"  # the study's data set stays
    assert smoke.params["batch_size"].branches[0].dist.values() == [16, 32]
    pinned = load_space(path, overrides={"model": "resnet18", "seed": 5}, smoke=True)
    assert pinned.base["model"] == "resnet18" and pinned.base["seed"] == 5 and pinned.grid_size() == 4
    assert "smoke (what --smoke-test runs instead)" in full.describe()


@pytest.mark.parametrize("section, message", [
    ("smoke:\n  lr: {loguniform: [1.0e-4, 1.0e-3]}\n", "must be a grid"),
    ("smoke:\n  batchsize: 16\n", "unknown smoke key"),
    ("smoke:\n  batch_size: [16, 32]\n", "scalar or {grid"),
])
def test_a_bad_smoke_section_is_refused_on_load(tmp_path, section, message):
    """Bug caught: a typo or a drawn distribution in the smoke section found only when a smoke test runs (or never:
    an unknown key silently ignored)."""
    with pytest.raises(SpaceError, match=message):
        load_space(write(tmp_path, STUDY.split("smoke:")[0] + section))


def test_smoke_options_keep_a_declared_study_on_its_data(tmp_path):
    """Bugs caught: a findings space's smoke test switched to the toy data set (SMOKE_OVERRIDES), ASHA stopping the
    points the verdicts compare, or num_samples 2 doubling a grid whose seeds are a dimension."""
    declared = smoke_options(load_space(write(tmp_path, STUDY)), SweepOptions(overrides={"data_root": "/data"}))
    assert declared.overrides == {"data_root": "/data"} and declared.scheduler == "fifo"
    assert declared.num_samples == 1 and declared.max_epochs == 2
    plain = smoke_options(load_space("quickstart"), SweepOptions())
    assert plain.overrides == SMOKE_OVERRIDES and plain.num_samples == 2


def test_the_shipped_findings_spaces_smoke_to_a_few_points():
    """Bug caught: a findings space whose smoke test is its whole grid (hours on 2 cores) or leaves Omniglot."""
    for name, points in (("findings_batch_size", 8), ("findings_memory_ratio", 6), ("findings_valid_negatives", 2),
                         ("findings_drift", 6)):
        space = load_space(name, smoke=True)
        assert space.grid_size() == points and space.base["dataset"] == "omniglot", name
        assert space.base["loss.kind"] == "contrastive" and space.base["miner.kind"] == "none"
        assert space.base["omniglot_rotations"] == 4 and space.base["val_by"] == "superclass"
