"""benchmarks/bench_gpu.py's arithmetic: row rates and the total of K trials sharing a GPU."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_gpu.py"
spec = importlib.util.spec_from_file_location("bench_gpu", path)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_shared_total_counts_the_window_in_which_every_trial_trains():
    """Trial A trains 100/s then 200/s over [0, 10] s, trial B 100/s over [4, 12] s: together 300/s from 5 to
    10 s and 200/s from 4 to 5 s, so 1700 images in the common window [4, 10]. The span of all passes
    (2300 / 12 s) counts B's tail alone against the pair; the sum of the trials' own rates (150 + 100) counts
    A's first 4 s, when B did not train."""
    results = [{"windows": [(0.0, 5.0, 500), (5.0, 10.0, 1000)]}, {"windows": [(4.0, 12.0, 800)]}]
    assert bench.shared_rate(results) == pytest.approx(1700 / 6)


def test_trials_that_never_train_together_give_no_total():
    """K trials one after the other are no measure of K sharing a GPU."""
    assert bench.shared_rate([{"windows": [(0.0, 1.0, 10)]}, {"windows": [(2.0, 3.0, 10)]}]) is None


def test_a_failed_or_out_of_memory_trial_gives_no_total():
    """A K whose trial ran out of memory must not report the survivors' total as if K trials trained."""
    assert bench.shared_rate([{"windows": [(0.0, 1.0, 10)]}, {"oom": True, "error": "CUDA out of memory"}]) is None


def test_row_rate_is_images_over_timed_seconds():
    """Averaging per-epoch rates would weight a short epoch like a long one: (100 + 300) / (1 + 2) s."""
    assert bench.rate({"windows": [(0.0, 1.0, 100), (5.0, 7.0, 300)]}) == pytest.approx(400 / 3)
