"""analysis.findings on synthetic frames whose answer is known: each claim's verdicts reproduced, not reproduced
and inconclusive; the interval rule; the figure and the command on a written sweep."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.findings import (INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, contrast, findings, judge,
                               verdicts_batch_size, verdicts_drift, verdicts_memory_ratio, verdicts_valid_negatives)

SEEDS = (0, 1, 2)
NOISE = np.array([-0.3, 0.0, 0.3])  # the same small spread in every cell


def trials(means: dict, noise=NOISE) -> pd.DataFrame:
    """A trial frame: ``means`` maps (variant, batch, ratio) to the cell's mean Recall@1 (percent)."""
    rows = [{"variant": v, "batch_size": b, "ratio": r, "seed": s, "recall": m + noise[s], "raw": 5.0,
             "untrained": 8.0, "trial": f"{v}-{b}-{r}-{s}"}
            for (v, b, r), m in means.items() for s in SEEDS]
    return pd.DataFrame(rows)


def batch_trials(none16, none128, xbm16, xbm128, noise=NOISE) -> pd.DataFrame:
    return trials({("none", 16, 0.0): none16, ("none", 128, 0.0): none128, ("xbm", 16, 1.0): xbm16,
                   ("xbm", 128, 1.0): xbm128, ("none+random", 16, 0.0): none16 - 5,
                   ("xbm+random", 16, 1.0): xbm16}, noise)


def test_contrast_matches_welch_by_hand():
    """Bug caught: a wrong interval (a standard deviation for a standard error, the z quantile, weights not squared):
    two cells of n = 3 against Welch's formula computed by hand."""
    from scipy import stats

    a, b = [1.0, 2.0, 3.0], [2.0, 4.0, 9.0]
    estimate, low, high, _ = contrast({"a": a, "b": b}, {"a": 1, "b": -1})
    va, vb = np.var(a, ddof=1) / 3, np.var(b, ddof=1) / 3
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2)
    half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    assert estimate == pytest.approx(2 - 5) and (low, high) == pytest.approx((-3 - half, -3 + half))


def test_judge_orders_the_three_outcomes():
    """Bug caught: a rule that calls an interval straddling the threshold reproduced, or a NaN interval anything but
    inconclusive."""
    assert judge(0.5, 3.0, 0.0, 1.0) == REPRODUCED
    assert judge(-2.0, 0.8, 0.0, 1.0) == NOT_REPRODUCED   # whatever is left is under a point
    assert judge(-2.0, 3.0, 0.0, 1.0) == INCONCLUSIVE
    assert judge(math.nan, math.nan, 0.0, 1.0) == INCONCLUSIVE


def test_batch_size_reproduced():
    """Bug caught: the gain contrast with a sign flipped (the paper's pattern, 20 points of batch gain without memory
    against 2 with it, judged not reproduced), or the batches taken in the wrong order."""
    found = verdicts_batch_size(batch_trials(40, 60, 70, 72))
    assert [v.outcome for v in found] == [REPRODUCED] * 3
    assert found[0].estimate == pytest.approx(18.0)


def test_batch_size_not_reproduced():
    """Bug caught: a verdict that reports a reproduction when memory gains as much from the batch as no memory and
    never catches up (equal gains, memory behind)."""
    found = verdicts_batch_size(batch_trials(40, 60, 35, 55))
    assert found[0].outcome == NOT_REPRODUCED and found[1].outcome == NOT_REPRODUCED


def test_batch_size_inconclusive_with_noise_or_one_seed():
    """Bug caught: noise (a spread of +-15 points) or a single seed per cell read as a verdict either way."""
    noisy = verdicts_batch_size(batch_trials(40, 45, 60, 61, noise=np.array([-15.0, 0.0, 15.0])))
    assert noisy[0].outcome == INCONCLUSIVE
    one_seed = batch_trials(40, 60, 70, 72).query("seed == 0")
    assert all(v.outcome == INCONCLUSIVE for v in verdicts_batch_size(one_seed))


def ratio_trials(values: dict, noise=NOISE) -> pd.DataFrame:
    return trials({("none" if r == 0 else "xbm", 16, r): m for r, m in values.items()}, noise)


@pytest.mark.parametrize("values, outcomes", [
    ({0.0: 40, 0.01: 60, 0.2: 64, 1.0: 64.2}, [REPRODUCED, REPRODUCED]),        # the paper's shape
    ({0.0: 40, 0.01: 41, 0.2: 50, 1.0: 64}, [NOT_REPRODUCED, NOT_REPRODUCED]),  # slow, unsaturated
])
def test_memory_ratio(values, outcomes):
    """Bug caught: the half-gain contrast or the saturation's non-inferiority read the wrong way round (a curve that
    rises slowly and keeps rising must not reproduce 'most of the gain at 1%' nor 'saturated')."""
    assert [v.outcome for v in verdicts_memory_ratio(ratio_trials(values))] == outcomes


def test_memory_ratio_without_ratio_zero_is_inconclusive():
    """Bug caught: a missing no-memory sweep (ratio 0 is its own sweep) silently taken as zero Recall@1."""
    found = verdicts_memory_ratio(ratio_trials({0.01: 60, 0.2: 64, 1.0: 64.5}))
    assert found[0].outcome == INCONCLUSIVE and "0: no runs" in found[0].detail


def epochs_frame(memory: list, batch: list, spread=(0.9, 1.0, 1.1), variant="xbm", drift=None) -> pd.DataFrame:
    rows = []
    for seed, k in zip(SEEDS, spread):
        for epoch, (m, b) in enumerate(zip(memory, batch), start=1):
            rows.append({"trial": f"{variant}-{seed}", "variant": variant, "seed": seed, "epoch": epoch,
                         "lr_step": 2, "memory_start": 2, "valid_neg_memory": m * k, "valid_neg_batch": b * k,
                         "drift_mean": (drift[epoch - 1] * k if drift else np.nan), "recall_at_1": np.nan})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("memory, batch, outcomes", [
    ([0, 1000, 1000, 1000], [20, 9, 6, 4], [REPRODUCED, REPRODUCED]),    # Fig. 4's picture
    ([0, 30, 30, 30], [20, 10, 12, 14], [NOT_REPRODUCED, NOT_REPRODUCED]),  # three times, and the batch's rising
])
def test_valid_negatives(memory, batch, outcomes):
    """Bug caught: the ratio taken before the memory starts (epoch 1's zero memory negatives), a ratio not in
    log10 against 10x, or the fall measured last minus first."""
    assert [v.outcome for v in verdicts_valid_negatives(epochs_frame(memory, batch))] == outcomes


def test_valid_negatives_one_trial_is_inconclusive():
    """Bug caught: one seed's numbers read as a finding."""
    one = epochs_frame([0, 1000, 1000], [20, 9, 6]).query("seed == 0")
    assert all(v.outcome == INCONCLUSIVE for v in verdicts_valid_negatives(one))


def drift_case(none_drift, xbm_drift, recalls) -> tuple[pd.DataFrame, pd.DataFrame]:
    epochs = pd.concat([epochs_frame([0] * 5, [0] * 5, variant="none", drift=none_drift),
                        epochs_frame([0] * 5, [0] * 5, variant="xbm", drift=xbm_drift)], ignore_index=True)
    return trials({(v, 64, 1.0): m for v, m in recalls.items()}), epochs


def test_drift_reproduced():
    """Bug caught: the decay drop looked up at the wrong epochs (lr_step 2: decays after epochs 2 and 4), the early
    drift compared at the wrong epoch, or XBN's non-inferiority margin on the wrong side."""
    none = [1.0, 0.9, 0.5, 0.45, 0.2]   # falls, and drops after each decay (epochs 2->3, 4->5)
    xbm = [1.0, 1.8, 1.0, 0.9, 0.4]     # twice the drift in the memory's first epoch (2)
    found = verdicts_drift(*drift_case(none, xbm, {"none": 50, "xbm": 60, "xbn": 59.8}))
    assert [v.outcome for v in found] == [REPRODUCED] * 5
    # Bug caught: the first epoch, which has no drift (no previous epoch), drawn as a point of n = 0 (the legend
    # then read "n=0" for every variant)
    unmeasured = drift_case([np.nan, *none[1:]], [np.nan, *xbm[1:]], {"none": 50, "xbm": 60, "xbn": 59.8})
    curve_ = findings(*unmeasured, "findings_drift").curve
    assert curve_["epoch"].min() == 2 and (curve_["n"] > 1).all()


def test_drift_not_reproduced():
    """Bug caught: rising drift, a memory that calms drift and loses, and an XBN two points behind all read as the
    thesis's findings."""
    none = [0.2, 0.3, 0.5, 0.6, 0.9]
    xbm = [0.2, 0.1, 0.3, 0.4, 0.5]
    found = verdicts_drift(*drift_case(none, xbm, {"none": 60, "xbm": 50, "xbn": 48}))
    assert [v.outcome for v in found] == [NOT_REPRODUCED] * 5


def test_drift_a_small_rise_is_not_the_thesis_doubling():
    """Bug caught: memory raising the early drift by 10% (every seed) read as the thesis's "roughly doubles"."""
    none = [1.0, 0.9, 0.5, 0.45, 0.2]
    xbm = [1.0, 0.99, 0.55, 0.5, 0.2]   # 1.1x in the memory's first epoch
    found = verdicts_drift(*drift_case(none, xbm, {"none": 50, "xbm": 60, "xbn": 59.8}))
    assert found[2].outcome == NOT_REPRODUCED and "roughly doubles" in found[2].condition


def test_findings_curve_floors_and_paper():
    """Bug caught: a curve without its intervals, floors missing from a Recall@1 claim, or the paper's values not
    from analysis.references (their source and note carried)."""
    found = findings(batch_trials(40, 60, 70, 72), pd.DataFrame(), "findings_batch_size")
    none = found.curve[found.curve["variant"] == "none"].set_index("batch_size")
    assert none.loc[16, "mean"] == pytest.approx(40) and none.loc[16, "low"] < 40 < none.loc[16, "high"]
    assert found.floors == {"raw pixels": 5.0, "untrained": 8.0}
    # Bug caught: a claim on another quantity (valid negatives, drift) set beside no reference at all: its runs'
    # Recall@1 and the floors are reported with it too
    counts = findings(batch_trials(40, 60, 70, 72), epochs_frame([0, 1000, 1000], [20, 9, 6]),
                      "findings_valid_negatives")
    assert counts.floors == found.floors and counts.recall == pytest.approx(found.recall)
    assert found.recall == pytest.approx(batch_trials(40, 60, 70, 72)["recall"].mean())
    assert set(found.paper["value"]) == {46.6, 71.7, 78.2, 81.4} and found.paper["note"].str.contains("Table 2").any()
    with pytest.raises(ValueError, match="findings_batch_size"):
        findings(batch_trials(40, 60, 70, 72), pd.DataFrame(), "batch_size")


def test_figure_is_written(tmp_path):
    """Bug caught: the figure's drawing failing on a claim whose paper values have no axis (valid negatives)."""
    from analysis.findings_plot import draw_findings

    found = findings(pd.DataFrame(columns=["variant", "recall"]), epochs_frame([0, 1000, 1000], [20, 9, 6]),
                     "findings_valid_negatives")
    assert set(found.curve["variant"]) == {"valid_neg_memory", "valid_neg_batch"}
    # Bug caught: epoch 1, before the memory starts (memory_start 2), drawn as the memory supplying 0 negatives
    assert found.curve["epoch"].min() == 2 and found.curve["mean"].min() > 0
    assert draw_findings(found, tmp_path / "f.png").stat().st_size > 1000
    batch = findings(batch_trials(40, 60, 70, 72), pd.DataFrame(), "findings_batch_size")
    assert draw_findings(batch, tmp_path / "b.png").stat().st_size > 1000


def test_claims_on_empty_frames_are_inconclusive():
    """Bug caught: a sweep with no finished trial (or no epoch rows) crashing the command instead of saying
    inconclusive, e.g. the drift claim's decay epochs read from an empty frame."""
    from analysis.findings import CLAIMS, EPOCH_VALUES

    trials_ = pd.DataFrame(columns=["variant", "batch_size", "ratio", "seed", "recall", "raw", "untrained", "trial"])
    epochs_ = pd.DataFrame(columns=["trial", "variant", "seed", "epoch", "lr_step", "memory_start", *EPOCH_VALUES])
    for name in CLAIMS:
        found = findings(trials_.astype({"variant": str}), epochs_.astype({"variant": str}), name)
        assert found.verdicts and all(v.outcome == INCONCLUSIVE for v in found.verdicts), name


@pytest.mark.parametrize("name", ["findings_batch_size", "findings_memory_ratio", "findings_valid_negatives",
                                  "findings_drift"])
def test_each_space_header_states_its_paper_numbers_and_verdicts(name):
    """Bug caught: a paper value in analysis.references.FINDINGS (what the figure draws) that the space's header,
    written before the run, does not state, or a header without its verdict conditions."""
    import re
    from pathlib import Path

    from analysis.references import FINDINGS

    text = (Path(__file__).resolve().parents[2] / "search_spaces" / f"{name}.yaml").read_text()
    header = text.split("\ndescription:")[0]
    assert "Verdicts" in header and "Scaled down" in header
    for cell in FINDINGS[name]:
        number = f"{cell.value:,.1f}".rstrip("0").rstrip(".") if cell.value >= 1000 else f"{cell.value:g}"
        assert re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", header), (name, cell.row, cell.value)
