"""benchmarks/bench_nmi.py: the figures the next GPU lease reads for ``nmi``'s two k-means."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("faiss")
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
spec = importlib.util.spec_from_file_location("bench_nmi", BENCHMARKS / "bench_nmi.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_a_row_times_both_paths_and_reports_nmi_values_near_each_other(capsys):
    """Bug caught: the benchmark broken by a change to xbm.evaluate.kmeans (found only on a GPU lease, in its
    minutes), or timing one path twice: the two NMI columns of one row must come from two clusterings that
    agree as two seeds do, not be the same number."""
    bench.main(["--sizes", "bench", "--repeats", "1", "--dim", "64"])
    row = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("bench:")]
    assert len(row) == 1
    cpp_s, device_s, ratio, cpp, device = row[0].split(")")[-1].split()
    assert float(cpp_s) > 0 and float(device_s) > 0 and ratio.endswith("x")
    assert 0.3 < float(cpp) < 1 and abs(float(cpp) - float(device)) < 0.05 and cpp != device


def test_an_unknown_size_is_refused_with_the_choices(capsys):
    """Bug caught: a mistyped size ending a lease's command in a KeyError traceback instead of naming the choices."""
    with pytest.raises(SystemExit):
        bench.main(["--sizes", "bench,imagenet"])
    assert "unknown ['imagenet']; choose from ['bench', 'cub', 'cars', 'sop']" in capsys.readouterr().err
