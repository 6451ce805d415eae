import math

import pandas as pd
import pytest

from analysis.oneshot_study import memory_comparison


def test_memory_comparison_by_hand():
    """Bug caught: paired differences taken against the wrong variant or over unmatched seeds (xbm has no seed 3),
    a t-interval with a normal quantile, or a rank correlation that is not Spearman's over the variants' means."""
    refits = pd.DataFrame({"variant": ["xbn"] * 3 + ["none"] * 3 + ["xbm"] * 2, "seed": [1, 2, 3, 1, 2, 3, 1, 2],
                           "error": [20.0, 22.0, 24.0, 25.0, 26.0, 30.0, 30.0, 31.0]})
    validation = pd.DataFrame({"variant": ["xbn"] * 3 + ["none"] * 3 + ["xbm"] * 2, "seed": [1, 2, 3, 1, 2, 3, 1, 2],
                               "val_oneshot_error": [30.0, 31.0, 32.0, 35.0, 36.0, 37.0, 33.0, 33.0]})
    variants, paired, spearman = memory_comparison(refits, validation, "xbn")
    assert variants["variant"].tolist() == ["xbn", "none", "xbm"]
    assert variants["mean"].tolist() == [22.0, 27.0, 30.5] and variants["val_mean"].tolist() == [31.0, 36.0, 33.0]
    none = paired.set_index("variant").loc["none"]
    half = 4.302652729911275 * 1.0 / math.sqrt(3)   # diffs 5, 4, 6: s = 1, t_{0.975, 2}
    assert (none["n"], none["mean"]) == (3, 5.0) and none["low"] == pytest.approx(5.0 - half)
    xbm = paired.set_index("variant").loc["xbm"]
    assert (xbm["n"], xbm["mean"]) == (2, 9.5)
    # ranks by test (1, 2, 3) and by validation (1, 3, 2): rho = 1 - 6 * 2 / (3 * 8)
    assert spearman == pytest.approx(0.5)
