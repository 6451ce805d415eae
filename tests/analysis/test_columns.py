"""Contract column helpers: variants, configuration keys, varying columns, seeds."""
import pandas as pd

from analysis import load
from analysis.columns import config_column, config_key, param_name, seeds, variant_labels, varying_columns


def test_names():
    assert config_column("memory.ratio") == "config.memory.ratio" == config_column("config.memory.ratio")
    assert param_name("config.memory.ratio") == "memory.ratio" and param_name("status") == "status"


def test_variants_split_by_flags_the_sweep_varies(build_sweep, tmp_path):
    b = build_sweep
    trials, epochs = [], []
    for i, (kind, centre) in enumerate((("xbn", False), ("xbn", True), ("none", False))):
        cfg = b["config"](kind, 0.5, 0, {"normaliser.centre_only": centre})
        rows = b["epoch_rows"](f"v{i}", cfg, 0.5, 2)
        epochs += rows
        trials.append(b["trial_row"](f"v{i}", cfg, rows, "completed"))
    sweep = load(b["write_sweep"](tmp_path / "variants", trials, epochs))
    assert list(sweep.trials.sort_values("trial_id")["variant"]) == ["xbn", "xbn+centre_only", "none"]
    assert set(sweep.epochs["variant"]) == {"xbn", "xbn+centre_only", "none"}
    assert list(variant_labels(pd.DataFrame({"x": [1]}), ())) == ["all"]


def test_the_no_memory_baseline_is_its_own_variant():
    frame = pd.DataFrame({"config.normaliser.kind": ["none", "none", "xbn"],
                          "config.memory.enabled": pd.array([True, False, None], dtype="boolean")})
    assert list(variant_labels(frame, ())) == ["none", "no_memory", "xbn"]


def test_label_free_objectives_are_variants_of_their_own():
    """Bug caught: MoCo + XBN pooled with supervised XBN (one "xbn" variant mixing two training objectives), or
    supervised labels changed for sweeps that predate the objective column (null objective)."""
    frame = pd.DataFrame({"config.normaliser.kind": ["xbn", "xbn", "none", "xbn", "none"],
                          "config.memory.enabled": [True, True, False, True, True],
                          "config.objective": ["supervised", "moco", "moco", None, "instance"]})
    assert list(variant_labels(frame, ())) == ["xbn", "moco:xbn", "moco:no_memory", "xbn", "instance:none"]


def test_config_key_varying_columns_and_seeds():
    frame = pd.DataFrame({"config.seed": pd.array([0, 1, 2], dtype="Int64"), "config.a": [1.0, 1.0, 2.0],
                          "config.b": [None, 0.5, None], "config.c": ["x", "x", "x"],
                          "seed": pd.array([None, 7, None], dtype="Int64")})
    keys = config_key(frame)
    assert keys[0] == "a=1.0|b=<null>|c=x" and keys[0] != keys[1]
    assert varying_columns(frame) == ["config.a", "config.b"]  # b: null vs value varies; seed excluded
    assert list(seeds(frame)) == [0, 7, 2]  # `seed`, falling back to config.seed
