"""One-parameter effects with reference points, heatmap, r / delay / ratio curves, parallel coordinates."""
import numpy as np
import pytest

from analysis import (NotApplicable, delay_curve, kalman_r_curve, load, memory_ratio_curve, parallel_coordinates,
                      param_effect, param_heatmap)


def test_lambda_mu_effect_with_reference(finished_sweep):
    effect = param_effect(load(finished_sweep), "normaliser.lambda_mu")
    s = effect.summary
    assert list(s["x"]) == pytest.approx([0.0, 0.4, 0.6])
    assert list(s["n"]) == [1, 3, 3]
    assert list(s["mean"]) == pytest.approx([0.35, 0.63, (0.66 + 0.69 + 0.70) / 3])
    assert list(s["best"]) == pytest.approx([0.35, 0.66, 0.70])
    ref = effect.reference
    assert ref.x == (0.0, 0.2, 0.4, 0.6, 0.8, 1.0) and ref.y == (72.5, 74.9, 84.8, 91.7, 60.4, 63.9)
    assert "reference values on CIFAR-100 from the paper" in ref.label
    assert not effect.log and not effect.categorical
    assert param_effect(load(finished_sweep), "config.normaliser.lambda_mu").summary.equals(s)


def test_kalman_and_ratio_curves_are_log_and_delay_not_swept(finished_sweep):
    sweep = load(finished_sweep)
    r = kalman_r_curve(sweep)
    assert r.log and list(r.summary["x"]) == pytest.approx([0.01, 1.0, 10.0]) and r.reference is None
    ratio = memory_ratio_curve(sweep)
    assert ratio.log and list(ratio.summary["n"]) == [12, 4, 12]
    with pytest.raises(NotApplicable, match="not swept"):
        delay_curve(sweep)
    with pytest.raises(NotApplicable, match="not a config column"):
        param_effect(sweep, "normaliser.nonexistent")


def test_categorical_effect(finished_sweep):
    effect = param_effect(load(finished_sweep), "normaliser.kind")
    assert effect.categorical
    assert effect.summary.set_index("x")["n"].to_dict() == {"axbn": 7, "none": 7, "pcxbn": 7, "xbn": 7}


def test_continuous_parameter_is_binned(build_sweep, tmp_path):
    b = build_sweep
    trials, epochs = [], []
    for i, mu in enumerate(np.linspace(0.0, 1.0, 20)):
        cfg = b["config"]("pcxbn", 0.5, i, {"normaliser.lambda_mu": float(mu), "normaliser.lambda_sigma": 1.0})
        rows = b["epoch_rows"](f"p{i}", cfg, 0.5 + 0.01 * i, 4)
        epochs += rows
        trials.append(b["trial_row"](f"p{i}", cfg, rows, "completed"))
    space = {"name": "c", "text": "params:\n  normaliser.lambda_mu: {uniform: [0.0, 1.0]}\n"}
    sweep = load(b["write_sweep"](tmp_path / "cont", trials, epochs, options={"space": space}))
    effect = param_effect(sweep, "normaliser.lambda_mu", bins=4)
    s = effect.summary
    assert len(s) == 4 and s["n"].sum() == 20
    assert list(s["x"]) == pytest.approx([0.125, 0.375, 0.625, 0.875])
    assert s["x_low"].iloc[0] == 0.0 and s["x_high"].iloc[-1] == 1.0
    grid = {"name": "g", "text": "params:\n  normaliser.lambda_mu: {grid: [0.0, 0.5, 1.0]}\n"}
    sweep = load(b["write_sweep"](tmp_path / "grid", trials, epochs, options={"space": grid}))
    assert len(param_effect(sweep, "normaliser.lambda_mu", bins=4).summary) == 20  # declared discrete: by value


def test_lambda_heatmap(finished_sweep):
    heat = param_heatmap(load(finished_sweep))
    assert heat.mean.loc[1.0, 0.6] == pytest.approx((0.66 + 0.69 + 0.70) / 3)
    assert heat.count.loc[1.0, 0.6] == 3 and heat.count.loc[0.2, 0.0] == 1
    assert int(heat.count.to_numpy().sum()) == 7


def test_parallel_coordinates(finished_sweep, failed_sweep):
    coords = parallel_coordinates(load(finished_sweep))
    axes = coords.axes.set_index("axis")
    assert axes.loc["config.memory.ratio", "kind"] == "log"
    assert axes.loc["config.normaliser.kind", "categories"] == ["axbn", "none", "pcxbn", "xbn"]
    values = coords.scaled.drop(columns="trial_id")
    assert (values.min().min() >= 0) and (values.max().max() <= 1)
    assert len(coords.scaled) == 28
    top = coords.scaled.set_index("trial_id").loc["pcxbn_0.5_2"]
    assert top["recall_at_1"] == pytest.approx(1.0) and top["config.memory.ratio"] == pytest.approx(1.0)
    assert "bad" not in set(parallel_coordinates(load(failed_sweep)).scaled["trial_id"])


def test_declared_scale_wins_over_the_name_heuristic(build_sweep, tmp_path):
    b = build_sweep
    trials, epochs = b["finished_rows"]()
    text = "params:\n  memory.ratio: {uniform: [0.1, 0.5]}\n"
    folder = b["write_sweep"](tmp_path / "declared", trials, epochs, options={"space": {"name": "x", "text": text}})
    sweep = load(folder)
    assert not param_effect(sweep, "memory.ratio").log  # LOG_PARAMS alone would say log
    assert memory_ratio_curve(sweep).log  # the curve's own choice is explicit
