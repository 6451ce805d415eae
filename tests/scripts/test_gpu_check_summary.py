"""scripts/gpu_check_summary.py: summary.md from the parts' table and logs, whatever state they are in."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_check_summary", ROOT / "scripts" / "gpu_check_summary.py")
summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summary)

CUDA_TESTS = """tests/xbm/test_memory.py::test_wrap[cuda] PASSED
[gw1] [ 50%] FAILED tests/xbm/test_trainer.py::test_gpu_run
=========================== short test summary info ============================
FAILED tests/xbm/test_trainer.py::test_gpu_run - RuntimeError: CUDA error
=================== 1 failed, 68 passed, 1 skipped in 40.12s ===================
"""
BENCH = """photos: reused 4000 500x375 JPEGs (200 classes) in /tmp/x in 0.0 s
  ceiling:
    [ceiling    4.0 s] process up, torch imported, 16 cores
  ceiling: 2900 images/s (ok, 14 s, first batch after 9.5 s)
  trainer cache:
    [trainer cache   60.0 s] epoch 1/2: started

CUT (SIGTERM): the tables below hold only the rows that finished; not run: trainer cache

row                     images/s  / timm / ceiling GPU util %
ceiling                     2900     n/a      1.00         97

evaluation by part / epoch's training pass
row                     retrieval        nmi      drift  staleness       rest      all
trainer XBN                 0.105      0.007      0.038      0.059      0.001    0.210

K trials on one GPU    total images/s  per trial  OOM  peak GiB per trial 1st batch s

Targets (issue 18)
  trainer (cache) / timm                           n/a  target >= 0.95
/usr/lib/python3.12/multiprocessing/resource_tracker.py:254: UserWarning: leaked semaphores
  warnings.warn('resource_tracker: There appear to be %d '
"""


def write(out: Path, parts: list[tuple[str, str]], logs: dict[str, str]) -> str:
    (out / "parts.tsv").write_text("".join(f"{name}\t{status}\t12\t95\n" for name, status in parts))
    for name, text in logs.items():
        (out / f"{name}.log").write_text(text)
    return summary.summary(out)


def test_every_part_has_its_line_and_its_key_figures(tmp_path):
    """One table line per part; a failed test named with the closing counts; the benchmark's tables, cut line
    and targets without the interpreter's warnings that follow them."""
    parts = [("env", "ok"), ("cuda-tests", "failed (exit 1)"), ("cuda-rerun", "skipped (no test failed)"),
             ("bench-gpu", "cut at 200 s")]
    logs = {"env": "torch cuda:0: NVIDIA H100 80GB HBM3, 79.2 GiB\n", "cuda-tests": CUDA_TESTS, "bench-gpu": BENCH}
    text = write(tmp_path, parts, logs)
    assert text.splitlines()[2].startswith("NVIDIA H100 80GB HBM3")
    for row in ("| env | ok | 12 | 95 |", "| cuda-tests | failed (exit 1) |",
                "| cuda-rerun | skipped (no test failed) |", "| bench-gpu | cut at 200 s |"):
        assert row in text
    tests = text.split("## cuda-tests")[1].split("## ")[0]
    assert "FAILED tests/xbm/test_trainer.py::test_gpu_run - RuntimeError" in tests
    assert "1 failed, 68 passed, 1 skipped" in tests and "--- last lines of cuda-tests.log" in tests  # not ok
    bench = text.split("## bench-gpu")[1]
    assert "CUT (SIGTERM)" in bench and "ceiling                     2900" in bench
    assert "trainer (cache) / timm" in bench and "warnings.warn" not in bench.split("--- last lines")[0]
    # the evaluation's parts once, under their title (the table's own "row" header is not a second table)
    assert bench.split("--- last lines")[0].count("trainer XBN                 0.105") == 1
    assert "evaluation by part / epoch's training pass\nrow                     retrieval" in bench
    assert "## cuda-rerun" not in text  # a skipped part has no log and no section


def test_a_killed_run_without_tables_shows_each_row_and_a_missing_log_is_said(tmp_path):
    """A benchmark killed before its tables (timeout's KILL) still reports the rows it finished; a part whose
    log was never written says so instead of failing the summary."""
    killed = "\n".join(line for line in BENCH.splitlines() if not line.startswith(("row", "ceiling ", "K trials",
                                                                                  "evaluation by", "trainer XBN")))
    text = write(tmp_path, [("bench-gpu", "cut at 200 s"), ("sweep", "failed (exit 1)")], {"bench-gpu": killed})
    assert "ceiling: 2900 images/s (ok, 14 s, first batch after 9.5 s)" in text
    assert "(no sweep.log)" in text
