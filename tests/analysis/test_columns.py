"""Contract column helpers: variants, configuration keys, varying columns, seeds, a metric's direction."""
import pandas as pd
import pytest

from analysis import leaderboard, load, param_effect
from analysis.columns import (config_column, config_key, higher_is_better, param_name, seeds, variant_labels,
                              varying_columns)
from analysis.tables import recall_at_k
from analysis.values import metric_values


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


def test_a_min_sweeps_metric_and_its_test_twin_follow_its_mode():
    """Bugs caught: ``test_<metric>`` (what a confirm run reports on the test classes) of a sweep with --mode min
    judged by its name as higher-is-better, so a metric the name list does not know ranked its confirm runs worst
    first; and ``val_oneshot_error`` (one-shot error, lower is better) ranked highest first when analysed beside
    another sweep metric."""
    assert not higher_is_better("one_error", "one_error", "min")
    assert not higher_is_better("test_one_error", "one_error", "min")  # the sweep's mode, not the name list
    assert higher_is_better("test_one_error", "one_error", "max")
    assert not higher_is_better("test_recall_at_1", "recall_at_1", "min")  # the mode wins over the name too
    assert higher_is_better("test_recall_at_1", "recall_at_1", "max") and higher_is_better("one_error", "loss", "min")
    assert not higher_is_better("val_oneshot_error", "recall_at_1", "max")  # by name: lower is better
    assert not higher_is_better("test_val_oneshot_error", "recall_at_1", "max")
    assert not higher_is_better("loss", "recall_at_1", "max") and higher_is_better("recall_at_1", "loss", "min")


ERRORS = {"a": (40.0, 30.0, 35.0), "b": (20.0, 25.0, 22.0), "c": (50.0, 45.0, 60.0)}  # per epoch, by trial


def _error_sweep(build_sweep, folder, metric="one_error"):
    """A sweep with --mode min on ``metric`` (a one-shot error in %, a name the list of lower-is-better metrics
    does not know), known from its epoch rows only (the trials' rows carry no best_/final_ of it): three sweep trials
    and, as ``confirm_<id>``, a confirm run of each with ``test_<metric>`` = the error + 1. Recall@1 falls as the
    error rises; a and c ran memory.ratio 0.1, b 0.2. Lowest errors: b 20 (epoch 1), a 30 (epoch 2), c 45 (epoch 2);
    highest: c 60, a 40, b 25."""
    b = build_sweep
    trials, epochs = [], []
    for i, (name, errors) in enumerate(ERRORS.items()):
        for stage, trial_id in (("sweep", name), ("confirm", f"confirm_{name}")):
            cfg = b["config"]("xbn", (0.1, 0.2, 0.1)[i], i, evaluate_test=stage == "confirm")
            rows = b["epoch_rows"](trial_id, cfg, 0.5, 3, stage=stage)
            for row, error in zip(rows, errors):
                row.update({metric: error, f"test_{metric}": error + 1.0, "recall_at_1": 1.0 - error / 100,
                            "recall_at_10": 1.0 - error / 200})
            epochs += rows
            trials.append(b["trial_row"](trial_id, cfg, rows, "completed", stage=stage))
    return load(b["write_sweep"](folder, trials, epochs, options={"metric": metric, "mode": "min"}))


def test_a_min_sweep_ranks_and_picks_epochs_by_its_lowest_value(build_sweep, tmp_path):
    """Bug caught: analysis of a sweep with --mode min keeping each trial's highest epoch and ranking the highest
    trial first: the leaderboard of the sweep (its metric) and of the confirm runs (``test_<metric>``), the best
    epoch Recall@K is read at, and a parameter's best value per level."""
    sweep = _error_sweep(build_sweep, tmp_path / "min")
    assert (sweep.metric, sweep.mode) == ("one_error", "min")
    values = metric_values(sweep).set_axis(sweep.stage_trials()["trial_id"])
    assert values.to_dict() == {"a": 30.0, "b": 20.0, "c": 45.0}
    board = leaderboard(sweep)
    assert list(board["trial_id"]) == ["b", "a", "c"] and list(board["best_one_error"]) == [20.0, 30.0, 45.0]
    confirm = leaderboard(sweep, "test_one_error", stage="confirm")
    assert list(confirm["trial_id"]) == ["confirm_b", "confirm_a", "confirm_c"]
    assert list(confirm["best_test_one_error"]) == [21.0, 31.0, 46.0]
    at_best = recall_at_k(sweep).set_index("trial_id")  # at epochs 1, 2, 2: the lowest error's
    assert at_best["recall_at_1"].to_dict() == pytest.approx({"b": 0.80, "a": 0.70, "c": 0.55})
    effect = param_effect(sweep, "memory.ratio")  # ratio 0.1: a and c, 0.2: b
    assert list(effect.summary["best"]) == [30.0, 20.0] and list(effect.summary["n"]) == [2, 1]
