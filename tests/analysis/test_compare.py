"""t-intervals, variant comparison and paired differences against hand computations.

t quantiles (two-sided 95%): t_{0.975, 2} = 4.302653, t_{0.975, 5} = 2.570582. With one degree of freedom t is
Cauchy: t_{p, 1} = tan(pi (p - 1/2)) and a two-sided p-value is 1 - (2 / pi) atan|t|.
"""
import math
import re
import warnings

import numpy as np
import pytest

from analysis import (NotApplicable, compare_variants, confirmation_table, load, matched_pairs, paired_differences,
                      t_interval)
from analysis.compare import comparison_rows, holm

T2, T5 = 4.302653, 2.570582
T1_95, T1_90 = math.tan(math.pi * 0.475), math.tan(math.pi * 0.45)  # 12.706205, 6.313752


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
    table = confirmation_table(load(confirm_sweep))
    assert list(table["variant"]) == ["pcxbn", "xbn"]  # best test mean first (bug caught: ascending order)
    table = table.set_index("variant")
    assert table.loc["pcxbn", "test_mean"] == pytest.approx(0.5866667, abs=1e-6)
    assert table.loc["pcxbn", "selection_mean"] == pytest.approx((0.64 + 0.66 + 0.61) / 3)
    assert table.loc["pcxbn", "sweep_best"] == pytest.approx(0.70)
    assert table.loc["xbn", "sweep_best"] == pytest.approx(0.65)
    assert table.loc["xbn", "n_completed"] == 3
    # bug caught: two confirmed configurations of one variant (two xbn ratios) shown under one label only
    assert "memory.ratio=0.5" in table.loc["xbn", "swept"] and "normaliser.kind=xbn" in table.loc["xbn", "swept"]
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
    with warnings.catch_warnings():  # bug caught (mutation testing): the confirm rows' values selected with
        warnings.simplefilter("error")  # the sweep rows' mask ("Boolean Series key will be reindexed")
        result = compare_variants(load(b["write_sweep"](tmp_path / "early_confirm", trials, epochs + rows)))
    # Bug caught (mutation testing): a garbled note in the label the report prints
    assert result.stage == "sweep" and result.value == (
        "best_recall_at_1 (sweep trials that finished their epoch budget; the confirm stage has no finished run yet)")
    assert len(result.table) == 4


def _write(b, folder, values, confirm=None, mode="max", confirm_epochs=4):
    """A sweep of completed full-budget trials, ``values[(kind, ratio)] = {seed: best R@1}`` and likewise
    ``confirm`` runs (test R@1 = best - 0.05; still running if ``confirm_epochs`` < 4), written in the order
    given (trial ids t00, t01, ...)."""
    trials, epochs = [], []
    for stage, spec in (("sweep", values), ("confirm", confirm or {})):
        n = 4 if stage == "sweep" else confirm_epochs
        for (kind, ratio), per_seed in spec.items():
            for seed, best in per_seed.items():
                trial_id = f"t{len(trials):02d}"
                cfg = b["config"](kind, ratio, seed, evaluate_test=stage == "confirm")
                rows = b["epoch_rows"](trial_id, cfg, best, n, stage=stage, test=stage == "confirm")
                epochs += rows
                trials.append(b["trial_row"](trial_id, cfg, rows, "completed" if n == 4 else "running", stage=stage))
    return load(b["write_sweep"](folder, trials, epochs, options={"mode": mode}))


# Exact binary fractions, so that equal differences are exactly equal. Means: xbn 0.625, axbn 0.4375,
# none 0.375, pcxbn 0.1875; pcxbn ran seeds 0 and 3.
PAIRED = {("xbn", 0.5): {0: 0.75, 1: 0.5}, ("axbn", 0.5): {0: 0.625, 1: 0.25}, ("none", 0.5): {0: 0.5, 1: 0.25},
          ("pcxbn", 0.5): {0: 0.25, 3: 0.125}}


def test_t_interval_rejects_confidence_outside_the_open_unit_interval():
    """Bug caught (mutation testing): confidence 0 (a zero-width interval), 1 (infinite bounds) or 1.5 accepted."""
    for confidence in (0.0, 1.0, 1.5, -0.5):
        message = f"confidence must satisfy 0 < confidence < 1, but got {confidence!r}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            t_interval([1, 2, 3], confidence=confidence)


def test_t_interval_of_two_values_by_hand():
    """Bug caught (mutation testing): NaN bounds for n = 2 (the smallest sample with a standard deviation);
    the ``sem`` and ``confidence`` fields left empty."""
    iv = t_interval([1.0, 2.0], confidence=0.9)
    # s = sqrt((0.5^2 + 0.5^2) / 1) = sqrt(0.5), sem = s / sqrt(2) = 0.5
    assert (iv.n, iv.mean, iv.confidence) == (2, 1.5, 0.9)
    assert iv.std == pytest.approx(math.sqrt(0.5)) and iv.sem == pytest.approx(0.5)
    assert (iv.low, iv.high) == (pytest.approx(1.5 - 0.5 * T1_90), pytest.approx(1.5 + 0.5 * T1_90))
    one = t_interval([0.5], confidence=0.8)
    assert one.confidence == 0.8 and math.isnan(one.sem) and math.isnan(one.high)


def test_t_interval_reads_mixed_half_precision_and_empty_input():
    """Bugs caught (mutation testing): a non-numeric entry raising instead of being left out; float16 values
    averaged in float16 (0.6299 instead of 0.6300456); a RuntimeWarning ("Mean of empty slice") for no values,
    which a confirmed configuration without a completed run produces in every report."""
    iv = t_interval([0.60, "n/a", None, 0.64, 0.65])
    assert iv.n == 3 and iv.mean == pytest.approx(0.63)
    # float16 holds 0.60009765625, 0.64013671875 and 0.64990234375: their mean is 1.89013671875 / 3
    half = t_interval(np.array([0.60, 0.64, 0.65], dtype=np.float16))
    assert half.mean == pytest.approx(1.89013671875 / 3, abs=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        empty = t_interval([])
    assert empty.n == 0 and math.isnan(empty.mean)


def test_default_selection_sweep_label_and_table_index(finished_sweep):
    """Bugs caught (mutation testing): a broken default ``select`` of ``comparison_rows``; a stray note in the
    label of sweep rows; the index kept from before sorting (``table.loc[0]`` must be the best variant)."""
    sweep = load(finished_sweep)
    assert comparison_rows(sweep).select == "best_config"
    result = compare_variants(sweep)
    assert result.value == "best_recall_at_1 (sweep trials that finished their epoch budget)"
    assert list(result.table.index) == [0, 1, 2, 3] and result.table.loc[0, "variant"] == "pcxbn"


def test_a_metric_other_than_the_sweeps(finished_sweep, confirm_sweep):
    """Bug caught (mutation testing): the ``metric`` argument dropped on the way, so MAP@R is asked for and the
    sweep's Recall@1 is read. The fixture's best MAP@R is best R@1 / 2, its test MAP@R at the last epoch
    R@1 / 2 - 0.02."""
    sweep = load(finished_sweep)
    result = compare_variants(sweep, metric="map_at_r")
    assert result.value == "best_map_at_r (sweep trials that finished their epoch budget)"
    assert result.table.set_index("variant").loc["xbn", "mean"] == pytest.approx(0.63 / 2)
    diff = paired_differences(sweep, metric="map_at_r").set_index(["a", "b"]).loc[("pcxbn", "xbn")]
    assert diff["mean_diff"] == pytest.approx(0.16 / 3 / 2)
    confirmed = load(confirm_sweep)
    result = compare_variants(confirmed, metric="map_at_r")
    assert (result.stage, result.value) == ("confirm", "final test_map_at_r")
    pcxbn = (0.64 + 0.66 + 0.61) / 6 - 0.02
    assert result.table.set_index("variant").loc["pcxbn", "mean"] == pytest.approx(pcxbn)
    table = confirmation_table(confirmed, metric="map_at_r").set_index("variant")
    assert table.loc["pcxbn", "test_mean"] == pytest.approx(pcxbn)
    assert table.loc["pcxbn", "selection_mean"] == pytest.approx((0.64 + 0.66 + 0.61) / 6)
    assert table.loc["pcxbn", "sweep_best"] == pytest.approx(0.70 / 2)


def test_no_finished_trial_is_not_applicable_with_the_reason(build_sweep, tmp_path):
    """Bug caught (mutation testing): NotApplicable raised without its message, which the report prints in
    place of the comparison."""
    b = build_sweep
    cfg = b["config"]("xbn", 0.5, 0)
    rows = b["epoch_rows"]("r0", cfg, 0.6, 2)
    sweep = load(b["write_sweep"](tmp_path / "running_only", [b["trial_row"]("r0", cfg, rows, "running")], rows))
    message = "no sweep trial has finished its epoch budget with a value of best_recall_at_1"
    with pytest.raises(NotApplicable, match=f"^{message}$"):
        compare_variants(sweep)


def test_best_configuration_needs_two_seeds_unless_no_configuration_has(build_sweep, tmp_path):
    """Bugs caught (mutation testing) in the ``best_config`` rule: a better single-seed configuration chosen
    over one with two seeds (xbn); two seeds not enough, only three (none); a variant whose configurations
    all ran once failing instead of falling back to its best single run (axbn)."""
    sweep = _write(build_sweep, tmp_path / "eligible", {
        ("xbn", 0.5): {0: 0.60, 1: 0.62}, ("xbn", 0.1): {0: 0.90},
        ("none", 0.5): {0: 0.50, 1: 0.52, 2: 0.54}, ("none", 0.1): {0: 0.56, 1: 0.58},
        ("axbn", 0.1): {0: 0.40}, ("axbn", 0.5): {1: 0.45}})
    table = compare_variants(sweep, select="best_config").table
    assert list(table["variant"]) == ["xbn", "none", "axbn"]
    assert list(table["mean"]) == pytest.approx([0.61, 0.57, 0.45]) and list(table["n"]) == [2, 2, 1]
    assert ["memory.ratio=0.5" in c for c in table["config"]] == [True, False, True]


def test_lower_is_better_picks_and_ranks_the_smallest(build_sweep, tmp_path):
    """Bug caught (mutation testing): a sweep with mode = min choosing each variant's configuration with the
    largest mean (xbn: 0.62 at ratio 0.5 instead of 0.53 at ratio 0.1)."""
    values = {("xbn", 0.5): {0: 0.60, 1: 0.64}, ("xbn", 0.1): {0: 0.50, 1: 0.56}, ("none", 0.5): {0: 0.40, 1: 0.44}}
    table = compare_variants(_write(build_sweep, tmp_path / "min", values, mode="min")).table
    assert list(table["variant"]) == ["none", "xbn"]
    assert table.loc[1, "mean"] == pytest.approx(0.53) and "memory.ratio=0.1" in table.loc[1, "config"]


def test_variant_table_columns_by_hand(build_sweep, tmp_path):
    """Bugs caught (mutation testing): the ``confidence`` argument ignored (0.95 used) or not recorded; the
    ``std``, ``sem``, ``ci_low`` and ``ci_high`` columns misnamed; a pooled row's ``config`` not "(pooled)"."""
    sweep = _write(build_sweep, tmp_path / "paired", PAIRED)
    result = compare_variants(sweep, confidence=0.9)
    xbn = result.table.loc[0]  # 0.75, 0.5: s = 0.25 / sqrt(2), sem = 0.125
    assert (result.confidence, xbn["variant"], xbn["n"]) == (0.9, "xbn", 2)
    assert (xbn["std"], xbn["sem"]) == (pytest.approx(0.25 / math.sqrt(2)), pytest.approx(0.125))
    assert (xbn["ci_low"], xbn["ci_high"]) == (pytest.approx(0.625 - 0.125 * T1_90),
                                               pytest.approx(0.625 + 0.125 * T1_90))
    assert xbn["half_width"] == pytest.approx(0.125 * T1_90)
    assert set(compare_variants(sweep, select="pooled").table["config"]) == {"(pooled)"}


def test_paired_p_values_with_two_pairs_and_identical_differences(build_sweep, tmp_path):
    """Bugs caught (mutation testing): no p-value for two pairs (the smallest paired test); a p-value of 0
    where every difference is the same (the t statistic is undefined without spread); runs without a
    partner kept as NaN pairs; the ``confidence`` argument ignored; the ``std`` column lost; only three seeds,
    not two, making ``auto`` choose ``best_config``."""
    sweep = _write(build_sweep, tmp_path / "paired", PAIRED)
    rows = comparison_rows(sweep)
    assert rows.select == "best_config"
    diffs = paired_differences(sweep, confidence=0.9).set_index(["a", "b"])
    assert list(diffs.index) == [("xbn", "axbn"), ("xbn", "none"), ("xbn", "pcxbn"), ("axbn", "none"),
                                 ("axbn", "pcxbn"), ("none", "pcxbn")]
    row = diffs.loc[("xbn", "axbn")]  # 0.125, 0.25: mean 0.1875, s = 0.125 / sqrt(2), sem = 0.0625, t = 3
    assert row["std"] == pytest.approx(0.125 / math.sqrt(2))
    assert (row["ci_low"], row["ci_high"]) == (pytest.approx(0.1875 - 0.0625 * T1_90),
                                               pytest.approx(0.1875 + 0.0625 * T1_90))
    assert row["p_value"] == pytest.approx(1 - 2 / math.pi * math.atan(3.0))
    assert diffs.loc[("axbn", "none"), "p_value"] == pytest.approx(0.5)  # 0.125, 0: t = 1
    same = diffs.loc[("xbn", "none")]  # 0.25, 0.25
    assert same["n_pairs"] == 2 and same["std"] == 0 and math.isnan(same["p_value"])
    pairs, _ = matched_pairs(rows, "xbn", "pcxbn")  # only seed 0 pairs
    assert list(pairs["seed"]) == [0] and list(pairs["diff"]) == [0.5]


def test_pooled_pairs_name_every_key(finished_sweep):
    """Bug caught (mutation testing): a garbled separator in ``matched_on`` when runs pair on more than the seed."""
    assert set(paired_differences(load(finished_sweep), select="pooled")["matched_on"]) == {"seed, config.memory.ratio"}


def test_variants_with_equal_means_rank_by_name(build_sweep, tmp_path):
    """Bug caught (mutation testing): variants with equal means listed in the order their trials were written,
    so which one is ``a`` in ``a - b`` would depend on file order rather than on the data."""
    sweep = _write(build_sweep, tmp_path / "tie", {("xbn", 0.5): {0: 0.5, 1: 0.75}, ("axbn", 0.5): {0: 0.75, 1: 0.5}})
    for select in ("best_config", "pooled"):
        assert list(compare_variants(sweep, select=select).table["variant"]) == ["axbn", "xbn"]
        assert paired_differences(sweep, select=select).loc[0, ["a", "b"]].tolist() == ["axbn", "xbn"]


def test_paired_differences_of_a_single_variant_is_an_empty_table(build_sweep, tmp_path):
    """Bug caught (mutation testing): with nothing to pair, the table lost its columns, so selecting
    ``p_value`` raised KeyError."""
    diffs = paired_differences(_write(build_sweep, tmp_path / "single", {("xbn", 0.5): {0: 0.5, 1: 0.75}}))
    assert len(diffs) == 0
    assert list(diffs.columns) == ["a", "b", "n_pairs", "mean_diff", "std", "ci_low", "ci_high", "p_value",
                                   "p_holm", "matched_on"]


def test_confirmation_table_lower_is_better_single_run_and_unswept_configuration(build_sweep, tmp_path):
    """Bugs caught (mutation testing): with mode = min, ``sweep_best`` taken as the sweep's largest value and
    the rows not ranked smallest first from index 0; a configuration confirmed with a single run failing (its
    second row read); one the sweep never ran failing instead of showing NaN; the columns misnamed; the
    ``confidence`` argument ignored."""
    sweep = _write(build_sweep, tmp_path / "min_confirm",
                   {("xbn", 0.5): {0: 0.60, 1: 0.64}, ("xbn", 0.1): {0: 0.50, 1: 0.56},
                    ("none", 0.5): {0: 0.40, 1: 0.44}},
                   confirm={("xbn", 0.1): {10: 0.55, 11: 0.59}, ("none", 0.5): {10: 0.45}, ("axbn", 0.3): {10: 0.65}},
                   mode="min")
    table = confirmation_table(sweep, confidence=0.9)
    assert list(table["variant"]) == ["none", "xbn", "axbn"] and list(table.index) == [0, 1, 2]
    xbn = table.loc[1]  # test R@1 = best - 0.05: 0.50, 0.54, mean 0.52, s = 0.04 / sqrt(2), sem = 0.02
    assert (xbn["n_runs"], xbn["n_completed"], xbn["seeds"]) == (2, 2, [10, 11])
    assert xbn["test_mean"] == pytest.approx(0.52) and xbn["test_std"] == pytest.approx(0.04 / math.sqrt(2))
    assert (xbn["test_ci_low"], xbn["test_ci_high"]) == (pytest.approx(0.52 - 0.02 * T1_90),
                                                         pytest.approx(0.52 + 0.02 * T1_90))
    assert "memory.ratio=0.1" in xbn["config"]
    assert list(table["sweep_best"][:2]) == pytest.approx([0.40, 0.50]) and math.isnan(table.loc[2, "sweep_best"])
    assert table.loc[0, "n_runs"] == 1 and math.isnan(table.loc[0, "test_ci_low"])


def test_confirmation_table_keeps_launch_order_until_runs_complete(build_sweep, tmp_path):
    """Bug caught (mutation testing): while no confirm run has completed (every test mean NaN), the rows listed
    alphabetically by configuration instead of in the order the confirm stage launched them (its ranking)."""
    sweep = _write(build_sweep, tmp_path / "confirming",
                   {("none", 0.5): {0: 0.50, 1: 0.52}, ("xbn", 0.5): {0: 0.60, 1: 0.62}},
                   confirm={("xbn", 0.5): {10: 0.6}, ("none", 0.5): {10: 0.5}}, confirm_epochs=2)
    table = confirmation_table(sweep)
    assert list(table["variant"]) == ["xbn", "none"] and list(table["n_completed"]) == [0, 0]
    assert table["test_mean"].isna().all() and list(table["sweep_best"]) == pytest.approx([0.62, 0.52])


def test_holm_by_hand():
    """Bug caught: pairwise p-values read as if each pair were the only test (no correction for the k(k-1)/2
    pairs of one table), or a Holm step-down that multiplies by the wrong count (m - j instead of m - j + 1),
    loses the running max (adjusted values out of the raw order) or exceeds 1.

    Sorted 0.01, 0.03, 0.04, 0.20 times 4, 3, 2, 1: 0.04, 0.09, 0.08 -> 0.09 (the running max), 0.20."""
    assert holm([0.01, 0.04, 0.03, 0.20]) == pytest.approx([0.04, 0.09, 0.09, 0.20])
    assert holm([0.5, 0.3, 0.04]) == pytest.approx([0.6, 0.6, 0.12])   # 0.04x3, 0.3x2, 0.5x1 -> 0.6: monotone
    assert holm([0.4, 0.9]) == pytest.approx([0.8, 0.9])
    assert holm([0.6, 0.7, 0.8]).tolist() == [1.0, 1.0, 1.0]   # 1.8, 1.4, 0.8 -> capped at 1
    assert holm([0.02, 0.02]) == pytest.approx([0.04, 0.04])   # ties: the same values in either order
    assert holm([0.03]) == pytest.approx([0.03]) and len(holm([])) == 0


def test_holm_leaves_pairs_without_a_test_out_of_the_family():
    """Bug caught: a NaN p-value (one pair, or no spread: no test) counted in the family size m, inflating every
    adjustment, or turned into a number; and p-values outside [0, 1] adjusted without a word."""
    adjusted = holm([0.01, math.nan, 0.04, math.nan])   # m = 2: 0.02, 0.04
    assert math.isnan(adjusted[1]) and math.isnan(adjusted[3])
    assert adjusted[[0, 2]] == pytest.approx([0.02, 0.04])
    assert np.isnan(holm([math.nan, math.nan])).all()
    message = "p-values must lie in [0, 1] (or be NaN for no test), but got [1.5]"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        holm([0.2, 1.5])


def _holm_rejects(p, alpha):
    """Holm's procedure as the paper states it, step by step: judge the p-values from the smallest; reject the
    i-th smallest (i from 1) while it is <= alpha / (m - i + 1); stop at the first that is not."""
    rejected = set()
    for i, j in enumerate(sorted(range(len(p)), key=lambda k: p[k])):
        if p[j] > alpha / (len(p) - i):
            break
        rejected.add(j)
    return rejected


def test_holm_adjusted_p_values_reject_what_holm_s_procedure_rejects():
    """Bug caught: adjusted p-values that disagree with the sequential procedure they stand for (``p_holm <=
    alpha`` must reject exactly what Holm's steps reject at alpha), checked on random families and levels."""
    rng = np.random.default_rng(1)
    for m in range(1, 9):
        for _ in range(20):
            p = np.round(rng.uniform(0, 0.3, m), 3)
            adjusted = holm(p)
            for alpha in (0.01, 0.05, 0.1, 0.2):
                # a hair above alpha: the products (m - i + 1) p_(i) are floats, the procedure's quotients too
                assert {j for j in range(m) if adjusted[j] <= alpha * (1 + 1e-9)} == _holm_rejects(p, alpha), (p, alpha)


def test_holm_agrees_with_statsmodels():
    """Bug caught: a hand-written Holm that differs from the reference implementation on random p-values
    (ties, values near 1, families of 1 to 12). Runs only where statsmodels is importable (not a dependency)."""
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    rng = np.random.default_rng(0)
    for m in range(1, 13):
        p = np.round(rng.uniform(0, 1, m) ** 3, 2)   # rounding makes ties
        assert holm(p) == pytest.approx(multitest.multipletests(p, method="holm")[1], abs=1e-12)


def test_paired_differences_adjust_every_pair_of_the_table_by_holm(build_sweep, tmp_path):
    """Bug caught: ``p_holm`` over a family other than the table's tested pairs (each pair alone, or the pairs
    without a test counted in), or not beside ``p_value``. PAIRED has six pairs, two with a test:
    (xbn, axbn) p = 1 - (2/pi) atan 3 = 0.2048 and (axbn, none) p = 0.5, so m = 2: 0.4097, then max(0.5, 0.4097)."""
    diffs = paired_differences(_write(build_sweep, tmp_path / "paired", PAIRED)).set_index(["a", "b"])
    p = 1 - 2 / math.pi * math.atan(3.0)
    assert diffs.loc[("xbn", "axbn"), "p_holm"] == pytest.approx(2 * p)
    assert diffs.loc[("axbn", "none"), "p_holm"] == pytest.approx(0.5)
    untested = diffs["p_value"].isna()
    assert untested.sum() == 4 and diffs.loc[untested, "p_holm"].isna().all()
    assert list(diffs.columns).index("p_holm") == list(diffs.columns).index("p_value") + 1
