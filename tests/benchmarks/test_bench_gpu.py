"""benchmarks/bench_gpu.py's arithmetic: row rates and the total of K trials sharing a GPU."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_gpu.py"
spec = importlib.util.spec_from_file_location("bench_gpu", path)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_shared_total_spans_the_window_of_all_trials():
    """Summing each trial's own rate (1000/10 + 1000/10 = 200/s) overstates the total when the trials do
    not train at the same time; the total is every image over the span they cover: 2000 / 12 s."""
    results = [{"windows": [(0.0, 10.0, 1000)]}, {"windows": [(2.0, 12.0, 1000)]}]
    assert bench.shared_rate(results) == pytest.approx(2000 / 12)


def test_a_failed_or_out_of_memory_trial_gives_no_total():
    """A K whose trial ran out of memory must not report the survivors' total as if K trials trained."""
    assert bench.shared_rate([{"windows": [(0.0, 1.0, 10)]}, {"oom": True, "error": "CUDA out of memory"}]) is None


def test_row_rate_is_images_over_timed_seconds():
    """Averaging per-epoch rates would weight a short epoch like a long one: (100 + 300) / (1 + 2) s."""
    assert bench.rate({"windows": [(0.0, 1.0, 100), (5.0, 7.0, 300)]}) == pytest.approx(400 / 3)
