"""scripts/gpu_check.sh end to end without CUDA: every part runs at toy size and the summary names each.

Slow (3 min 13 s on 2 cores shared with a CI run, 5 min 41 s before the toy rows' loaders forked their workers;
up to 13 minutes before the toy rows forked from a preloaded server): the toy benchmark rows, a CPU sweep through
Ray. It keeps the first command of a GPU lease working where no GPU is, as CI is; CUDA is hidden so a GPU machine
runs it the same.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .wheel_fixture import make_wheel

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("wheels", "env", "cuda-tests", "cuda-rerun", "normalisers", "checkpoint", "bench-gpu", "sweep")


@pytest.mark.slow
def test_every_part_runs_without_cuda_and_the_summary_lists_each(tmp_path):
    out, work, wheels, site = tmp_path / "out", tmp_path / "work", tmp_path / "wheels", tmp_path / "site"
    wheels.mkdir()
    make_wheel(wheels, "xbm_probe", "1.0")  # --wheels: what the image lacks is installed into XBM_SITE
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHON=sys.executable, CUDA_VISIBLE_DEVICES="", XBM_SITE=str(site))
    # caps for the slowest CI machine seen, not the script's toy defaults: there the toy bench-gpu took 550 s
    # (cut at its 400) and the checkpoint part 47 s of its 60 (2026-11-28). How a cut part reads is
    # test_gpu_check_summary.py's; the sweep's cap stays, since its time budget follows it. The wheels and env
    # parts (cold imports of torch, faiss and scikit-learn on a fresh clone beside the other test worker) get
    # room too: CI's run of 2026-12-02 ended 1 with every part it printed ok, the parts' table cut from its tail.
    env.update(CAP_WHEELS="300", CAP_ENV="300", CAP_TESTS="400", CAP_NORMALISERS="300", CAP_CHECKPOINT="300",
               CAP_BENCH="1000")
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(out), "--wheels", str(wheels),
                           "--work", str(work)], capture_output=True, text=True, env=env, timeout=1750)
    assert done.returncode == 0, not_ok_parts(out) + done.stdout[-3000:] + done.stderr[-2000:]

    summary = (out / "summary.md").read_text()
    assert summary.startswith("# GPU check") and "no CUDA (toy sizes)" in summary
    statuses = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in summary.splitlines()
                if line.startswith("| ") and not line.startswith(("| part", "| ---"))}
    assert list(statuses) == list(PARTS)
    assert statuses["cuda-rerun"] == "skipped (no test failed)"
    assert all(statuses[p] == "ok" for p in PARTS if p != "cuda-rerun"), statuses
    for part in PARTS:
        if part != "cuda-rerun":
            assert (out / f"{part}.log").stat().st_size > 0, part
            assert f"## {part}: ok" in summary, part

    assert (site / "xbm_probe.py").is_file() and "installed 1 of 1 wheels" in summary
    assert "SKIPPED" in (out / "cuda-tests.log").read_text()  # -v: each test named as it ends
    checkpoint = summary.split("## checkpoint")[1]
    assert "CheckpointWriter.save: the epoch waits" in checkpoint and "the copy alone, packed per dtype" in checkpoint
    bench = (out / "bench-gpu.log").read_text()
    assert "first batch after" in bench and "references in" in bench and "photos: wrote" in bench
    lines = [json.loads(line) for line in (out / "bench_gpu.jsonl").read_text().splitlines()]
    assert len(lines) == 9 + 2  # every row (gpu_rows.ROWS), K = 1, 2
    # evaluation by part: a part left at zero would say its function is no longer the one the trainer calls
    parts = {line["row"]: line["eval_parts"] for line in lines if "eval_parts" in line}
    # every part's function runs each epoch (staleness without a memory too: it returns NaN at once)
    assert all(v > 0 for p in parts.values() for name, v in p.items() if name != "rest"), parts
    assert "evaluation by part" in summary.split("## bench-gpu")[1]
    assert "targets: " in summary.split("## sweep")[1]
    assert (out / "sweep_results" / "trials.parquet").is_file()
    assert not list(out.rglob("*.jpg")) and (work / "bench" / "data" / "CUB_200_2011" / "COMPLETE").is_file()


def not_ok_parts(out: Path) -> str:
    """For a failed run's message: the parts' table and the tail of each part's log that did not end ok."""
    table = out / "parts.tsv"
    if not table.exists():
        return "(no parts.tsv)\n"
    text = "parts:\n" + table.read_text()
    for line in table.read_text().splitlines():
        name, status = line.split("\t")[:2]
        log = out / f"{name}.log"
        if status != "ok" and not status.startswith("skipped") and log.exists():
            text += f"--- {name}.log ({status}), its end:\n{log.read_text()[-1500:]}\n"
    return text + "---\n"
