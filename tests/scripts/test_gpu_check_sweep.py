"""scripts/gpu_check_sweep.py: trials at once, GPU samples, memory against the caps."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_check_sweep", ROOT / "scripts" / "gpu_check_sweep.py")
sweep = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = sweep  # its dataclass looks its module up
spec.loader.exec_module(sweep)


def test_trials_one_after_the_other_are_not_at_once():
    """An end at the very time of the next start (one Ray actor, reused) is one trial at a time."""
    assert sweep.most_at_once([(0, 10), (10, 20), (20, 30)]) == 1
    assert sweep.most_at_once([(0, 10), (5, 20), (6, 7), (30, 40)]) == 3
    assert sweep.most_at_once([]) == 0


def fake_sweep(root: Path, peaks: list[float]) -> Path:
    """Two trials trained side by side (Ray's result.json), their Parquet with each one's peak memory."""
    (root / "results" / "epochs").mkdir(parents=True)
    rows = []
    for i, peak in enumerate(peaks):
        tid = f"t{i}"
        trial = root / f"trial_{tid}"
        trial.mkdir()
        reports = [{"timestamp": 100 + 10 * e, "time_this_iter_s": 10.0, "setup_s": 5.0} for e in (1, 2)]
        (trial / "result.json").write_text("".join(json.dumps(r) + "\n" for r in reports))
        pd.DataFrame({"trial_id": [tid] * 2, "epoch": [1, 2], "gpu_memory_peak_gib": [peak / 2, peak]}).to_parquet(
            root / "results" / "epochs" / f"{tid}.parquet")
        rows.append({"trial_id": tid, "status": "completed", "error": None, "wall_time_s": 25.0, "setup_s": 5.0,
                     "train_s": 15.0, "eval_s": 4.0})
    pd.DataFrame(rows).to_parquet(root / "results" / "trials.parquet")
    return root


def samples(apps_mib: list[float]) -> list:
    return [sweep.Sample(100.0 + t, 90.0, 20_000.0, 81_920.0, {100 + i: m for i, m in enumerate(apps_mib)})
            for t in range(5)]


def test_two_trials_sharing_the_gpu_within_their_caps_meet_the_targets(tmp_path):
    lines = sweep.figures(fake_sweep(tmp_path, [20.0, 22.0]), 60.0, samples([21_000, 23_000]), 0.5)
    text = "\n".join(lines)
    assert "trials: 2 (2 completed), 4 epochs in 60 s" in text and "trials per hour: 120" in text
    assert "up to 2 trials training" in text and "up to 2 processes on the GPU" in text
    assert "GPU utilisation: 90 %" in text
    assert lines[-1] == "targets: 2 trial(s) finished: met; 2 trials on the GPU at once: met; memory caps held: met"


def test_a_trial_over_its_allocator_cap_is_a_missed_target(tmp_path):
    """80 GiB shared by two: each allocator is capped at 40 - 1 GiB; a 39.5 GiB peak broke it."""
    lines = sweep.figures(fake_sweep(tmp_path, [20.0, 39.5]), 60.0, samples([21_000]), 0.5)
    assert "allocator cap 39.0 GiB" in "\n".join(lines)
    assert lines[-1].endswith("memory caps held: NOT met")


def test_samples_with_a_hidden_process_list_or_a_cut_line_are_read(tmp_path):
    """In a container nvidia-smi may list no process; an unreadable value ("[N/A]") or a half-written last
    line is skipped, not fatal."""
    path = tmp_path / "gpu.csv"
    path.write_text("1.0,50,100,81920,\n2.0,[N/A],100,81920,\n3.0,60,200,81920,7:1024;8:2048\n"
                    "4.0,70,200,81920,9:[N/A]\n5.0,7")
    read = sweep.read_samples(path)
    assert [s.util for s in read] == [50.0, 60.0, 70.0] and read[1].apps == {7: 1024.0, 8: 2048.0}
    assert read[2].apps == {9: 0.0}  # a process whose memory cannot be read still counts as one on the GPU


def test_a_sweep_slow_to_stop_still_gets_its_figures_before_timeout_kills_it(tmp_path):
    """Bug caught (by design): timeout's SIGINT at the part's cap, then its KILL 15 s later, would leave no
    figures if the run waited for a sweep that takes longer to stop. 8 s after the signal the figures are
    printed from what the sweep wrote so far, and the sweep is still waited for."""
    import signal
    import subprocess
    import time

    stubborn = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(12)"
    run = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "gpu_check_sweep.py"), "run", "--out", str(tmp_path),
                            "--sweep", str(tmp_path / "sweep"), "--", sys.executable, "-c", stubborn],
                           stdout=subprocess.PIPE, text=True, env={"PATH": "", "PYTHONPATH": str(ROOT)})
    time.sleep(2)
    start = time.time()
    run.send_signal(signal.SIGINT)
    first = run.stdout.readline() + run.stdout.readline()
    printed = time.time() - start
    rest = run.stdout.read()
    assert run.wait() == 0
    assert "sweep command: still stopping (stopped by a signal)" in first and printed < 11
    assert "no trials.parquet" in rest and "targets: NOT met" in rest
