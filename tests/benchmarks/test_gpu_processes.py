"""benchmarks/gpu_processes.py: bench_gpu.py's row processes, their phases and their time cap."""
from __future__ import annotations

import multiprocessing as mp
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # as bench_gpu.py does: its helpers import each other by name
import gpu_processes  # noqa: E402
from gpu_phases import Phases  # noqa: E402

FORK = mp.get_context("fork")  # the targets below live in this test module, which a spawned child cannot import


def row(kind: str, spec: dict, queue, barrier) -> None:
    """A stand-in row: reports phases through gpu_phases, then finishes, hangs or dies as ``kind`` says."""
    phases = Phases(queue, spec["index"], spec["started"])
    phases("data")
    if kind == "hang":
        list(phases.batches(iter(lambda: time.sleep(0.05), 1), "epoch 1", timed=True))  # a loader that never ends
    elif kind == "die":
        import os

        time.sleep(0.3)  # the queue's feeder thread sends "data" (a process killed at once may lose its last phase)
        os._exit(3)
    elif kind == "slow":
        time.sleep(spec["sleep"])
    queue.put(("result", spec["index"], {"windows": [(0.0, 1.0, 10)], "first_batch_s": phases.first_timed_batch}))


def test_a_stuck_row_is_ended_at_its_time_cap_naming_its_last_phase(capsys):
    """Bug caught: a trainer row that never reached its first batch held a 10-minute GPU command until it was
    killed, and the cut run said nothing of where the time went. The cap ends it (no process is left) and the
    row's result names the phase it was stuck in; the phases were printed as they came."""
    before = set(mp.active_children())  # an earlier test's loader workers in this pytest process are not ours
    start = time.time()
    [result] = gpu_processes.run_processes(FORK, [("hang", {})], names=["trainer live"], timeout=1.5, target=row)
    assert time.time() - start < 15
    assert result["timeout"] and "last phase: epoch 1: first batch after" in result["error"]
    out = capsys.readouterr().out
    assert "[trainer live" in out and "] data" in out and "the row's first timed batch" in out
    assert not [p for p in set(mp.active_children()) - before if p.is_alive()]


def test_rows_that_finish_or_die_are_told_apart_and_a_result_in_by_the_deadline_counts():
    """A row that finished just before its cap keeps its result; one that died without a word (segfault,
    out-of-memory killer) is reported with its exit code and last phase instead of waiting for the cap."""
    done, dead = gpu_processes.run_processes(FORK, [("slow", {"sleep": 0.1}), ("die", {})], timeout=20, target=row)
    assert done == {"windows": [(0.0, 1.0, 10)], "first_batch_s": None}
    assert "exit code 3" in dead["error"] and "last phase: data" in dead["error"] and not dead.get("timeout")
