"""t-intervals, variant comparison and paired differences against hand computations.

t quantiles (two-sided 95%): t_{0.975, 2} = 4.302653, t_{0.975, 5} = 2.570582.
"""
import math

import pytest

from analysis import (NotApplicable, compare_variants, confirmation_table, load, matched_pairs, paired_differences,
                      t_interval)
from analysis.compare import comparison_rows

T2, T5 = 4.302653, 2.570582


def test_t_interval_by_hand():
    iv = t_interval([0.60, 0.64, 0.65])
    std = math.sqrt((0.03 ** 2 + 0.01 ** 2 + 0.02 ** 2) / 2)
    assert (iv.n, iv.mean, iv.std) == (3, pytest.approx(0.63), pytest.approx(std))
    assert iv.half_width == pytest.approx(T2 * std / math.sqrt(3), rel=1e-6)
    assert (iv.low, iv.high) == (pytest.approx(0.63 - 0.0657241, abs=1e-6), pytest.approx(0.63 + 0.0657241, abs=1e-6))
    one = t_interval([0.5, float("nan")])
    assert one.n == 1 and one.mean == 0.5 and math.isnan(one.low) and math.isnan(one.std)
    assert t_interval([1, 2, 3, 4], confidence=0.9).half_width == pytest.approx(2.353363 * 1.290994 / 2, rel=1e-5)
    with pytest.raises(ValueError, match="confidence"):
        t_interval([1, 2], confidence=95)


def test_compare_variants_uses_best_configuration_over_seeds(finished_sweep):
    result = compare_variants(load(finished_sweep))
    assert (result.select, result.stage) == ("best_config", "sweep")
    table = result.table.set_index("variant")
    assert list(table.index) == ["pcxbn", "xbn", "axbn", "none"]
    assert table.loc["xbn", "mean"] == pytest.approx(0.63)
    assert table.loc["xbn", "half_width"] == pytest.approx(0.0657241, abs=1e-6)
    assert table.loc["pcxbn", "mean"] == pytest.approx((0.66 + 0.69 + 0.70) / 3)
    # axbn's better configuration is ratio 0.1 (0.6033 > 0.5967)
    assert "memory.ratio=0.1" in table.loc["axbn", "config"]
    assert table.loc["none", "seeds"] == [0, 1, 2] and set(table["unit"]) == {"seeds"}
    assert set(table["n"]) == {3}


def test_paired_differences_on_shared_seeds(finished_sweep):
    diffs = paired_differences(load(finished_sweep)).set_index(["a", "b"])
    row = diffs.loc[("pcxbn", "xbn")]  # seeds 0, 1, 2: 0.06, 0.05, 0.05
    std = math.sqrt(((0.06 - 0.16 / 3) ** 2 + 2 * (0.05 - 0.16 / 3) ** 2) / 2)
    assert row["n_pairs"] == 3 and row["matched_on"] == "seed"
    assert row["mean_diff"] == pytest.approx(0.16 / 3)
    assert row["ci_low"] == pytest.approx(0.16 / 3 - T2 * std / math.sqrt(3), rel=1e-5)
    # Two-sided paired t-test by hand: t = mean / (std / sqrt(3)) = 16 with 2 degrees of freedom, whose CDF
    # is 1/2 + t / (2 sqrt(2 + t^2)), so p = 1 - |t| / sqrt(2 + t^2) = 0.00388 (one-sided: half of it).
    # Bug caught: a one-sided p-value, or df = n instead of n - 1.
    t = (0.16 / 3) / (std / math.sqrt(3))
    assert row["p_value"] == pytest.approx(1 - abs(t) / math.sqrt(2 + t * t), rel=1e-4)
    assert len(diffs) == 6


def test_pooled_pairs_match_seed_and_shared_config(finished_sweep):
    sweep = load(finished_sweep)
    rows = comparison_rows(sweep, select="pooled")
    assert len(rows.frame) == 24  # completed only: ASHA-stopped trials are left out
    pairs, key = matched_pairs(rows, "pcxbn", "xbn")
    assert key == ["seed", "config.memory.ratio"]  # lambdas exist only for pcxbn: not a pairing key
    diffs = sorted(round(d, 6) for d in pairs["diff"])
    assert diffs == sorted([0.05, 0.02, 0.08, 0.06, 0.05, 0.05])
    row = paired_differences(sweep, select="pooled").set_index(["a", "b"]).loc[("pcxbn", "xbn")]
    sd = pairs["diff"].std(ddof=1)
    assert row["n_pairs"] == 6 and row["ci_high"] == pytest.approx(0.31 / 6 + T5 * sd / math.sqrt(6), rel=1e-5)
    with pytest.raises(ValueError, match="no rows"):
        matched_pairs(rows, "pcxbn", "scxbn")


def test_auto_selection_pools_when_no_configuration_repeats(failed_sweep):
    result = compare_variants(load(failed_sweep))
    assert result.select == "pooled" and set(result.table["unit"]) == {"trials"}
    assert set(result.table["variant"]) == {"none", "xbn"}  # the failed axbn trial is left out
    with pytest.raises(ValueError, match="select"):
        compare_variants(load(failed_sweep), select="best")


def test_confirm_stage_is_preferred(confirm_sweep):
    sweep = load(confirm_sweep)
    result = compare_variants(sweep)
    assert result.stage == "confirm" and result.value == "final test_recall_at_1"
    table = result.table.set_index("variant")
    assert list(table.index) == ["pcxbn", "xbn"]
    assert table.loc["pcxbn", "mean"] == pytest.approx((0.59 + 0.61 + 0.56) / 3)
    assert table.loc["pcxbn", "seeds"] == [10, 11, 12]
    diff = paired_differences(sweep).iloc[0]  # xbn test: 0.57, 0.58, 0.52 -> diffs 0.02, 0.03, 0.04
    assert (diff["a"], diff["b"], diff["n_pairs"]) == ("pcxbn", "xbn", 3)
    assert diff["mean_diff"] == pytest.approx(0.03)
    assert diff["ci_high"] == pytest.approx(0.03 + T2 * 0.01 / math.sqrt(3), rel=1e-5)


def test_confirmation_table(confirm_sweep, finished_sweep):
    table = confirmation_table(load(confirm_sweep)).set_index("variant")
    assert table.loc["pcxbn", "test_mean"] == pytest.approx(0.5866667, abs=1e-6)
    assert table.loc["pcxbn", "selection_mean"] == pytest.approx((0.64 + 0.66 + 0.61) / 3)
    assert table.loc["pcxbn", "sweep_best"] == pytest.approx(0.70)
    assert table.loc["xbn", "sweep_best"] == pytest.approx(0.65)
    assert table.loc["xbn", "n_completed"] == 3
    with pytest.raises(NotApplicable):
        confirmation_table(load(finished_sweep))


def test_confirmation_table_of_a_sweep_that_varied_nothing(build_sweep, tmp_path):
    """A one-configuration sweep (every param pinned by --set): its best is the configuration's best."""
    b = build_sweep
    cfg = b["config"]("none", 0.5, 0)
    rows = b["epoch_rows"]("s0", cfg, 0.52, 3)
    trials, epochs = [b["trial_row"]("s0", cfg, rows, "completed")], list(rows)
    for seed in (1, 2):
        c = b["config"]("none", 0.5, seed, evaluate_test=True)
        confirm_rows = b["epoch_rows"](f"c{seed}", c, 0.5, 3, stage="confirm", test=True)
        epochs += confirm_rows
        trials.append(b["trial_row"](f"c{seed}", c, confirm_rows, "completed", stage="confirm"))
    table = confirmation_table(load(b["write_sweep"](tmp_path / "one", trials, epochs)))
    assert len(table) == 1 and table.loc[0, "sweep_best"] == pytest.approx(0.52)


def test_unfinished_confirm_stage_falls_back_to_sweep_rows(build_sweep, tmp_path):
    b = build_sweep
    trials, epochs = b["finished_rows"]()
    cfg = b["config"]("xbn", 0.5, 10, evaluate_test=True)
    rows = b["epoch_rows"]("c0", cfg, 0.6, 2, stage="confirm", test=True)  # 2 of 4 epochs so far
    trials.append(b["trial_row"]("c0", cfg, rows, "running", stage="confirm"))
    result = compare_variants(load(b["write_sweep"](tmp_path / "early_confirm", trials, epochs + rows)))
    assert result.stage == "sweep" and "no finished run yet" in result.value
    assert len(result.table) == 4
