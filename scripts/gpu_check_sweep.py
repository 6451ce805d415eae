"""The sweep part of ``scripts/gpu_check.sh``: what a real sweep did with the GPU.

    python scripts/gpu_check_sweep.py run --out OUT --sweep SWEEP --gpus-per-trial 0.5 -- python -m tune.cli sweep ...
    python scripts/gpu_check_sweep.py sample FILE              # nvidia-smi each second into FILE, until SIGTERM
    python scripts/gpu_check_sweep.py figures SWEEP --wall S [--samples FILE] [--gpus-per-trial 0.5]

``run`` samples the GPU (``OUT/sweep_gpu.csv``) while the sweep command runs, then copies the sweep's
``results/`` (Parquet, sweep.json: small) to ``OUT/sweep_results`` and prints the figures, also when the
sweep was stopped: SIGINT or SIGTERM (``timeout``) reaches the sweep, which ends its trials and writes its
Parquet (a sweep that has not ended 5 s later is sent SIGINT; 8 s after the signal the figures are printed
from the Parquet written so far, while it stops); exit status the sweep's.

``sample`` writes ``time,util %,memory used MiB,memory total MiB,apps`` lines (``apps``: the compute processes
as ``pid:MiB`` joined by ``;``; empty where a container hides them). ``figures`` reads the sweep's Parquet
(``results/trials.parquet``, ``results/epochs/*.parquet``), Ray's per-trial ``result.json`` (when each epoch
was reported) and the samples, and prints: trials by status, trials and epochs per hour of the sweep's wall
time, how many trials trained at once, the GPU's utilisation while trials ran, each trial's peak allocated
memory against its allocator cap (``tune.trial.resources.allocator_cap``) and its processes' memory against its
share, where the trials' time went, and the failures. The last lines are targets (met / NOT met).
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional


# ---- sampling -------------------------------------------------------------------------------------
def sample(path: Path, period: float = 1.0) -> None:
    """nvidia-smi every ``period`` seconds, one line each, until SIGTERM (or SIGINT)."""
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: sys.exit(0))
    if shutil.which("nvidia-smi") is None:
        return
    gpu = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits",
           "--id=0"]
    apps = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits", "--id=0"]
    with open(path, "a") as out:
        while True:
            start = time.time()
            try:
                util, used, total = [v.strip() for v in _run(gpu).splitlines()[0].split(",")]
                procs = ";".join(":".join(v.strip() for v in row.split(",")) for row in _run(apps).splitlines()
                                 if row.strip() and "," in row)
                out.write(f"{start:.1f},{util},{used},{total},{procs}\n")
                out.flush()
            except Exception:  # a failed read loses one sample, not the sampler
                pass
            time.sleep(max(0.0, period - (time.time() - start)))


def _run(command: list[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True, timeout=10).stdout


@dataclass
class Sample:
    time: float
    util: float
    used_mib: float
    total_mib: float
    apps: dict[int, float] = field(default_factory=dict)  # pid -> MiB


def read_samples(path: Optional[Path]) -> list[Sample]:
    samples = []
    if path is None or not path.is_file():
        return samples
    for row in path.read_text().splitlines():
        parts = row.split(",", 4)
        try:
            samples.append(Sample(float(parts[0]), float(parts[1]), float(parts[2]), float(parts[3]), _apps(parts[4])))
        except (ValueError, IndexError):  # "[N/A]", a cut line
            continue
    return samples


def _apps(text: str) -> dict[int, float]:
    """``pid:MiB;...``; a process whose memory reads "[N/A]" (MIG, some containers) counts with 0 MiB."""
    apps = {}
    for app in text.split(";"):
        pid, _, mib = app.partition(":")
        if pid.strip().isdigit():
            try:
                apps[int(pid)] = float(mib)
            except ValueError:
                apps[int(pid)] = 0.0
    return apps


# ---- figures --------------------------------------------------------------------------------------
def trial_windows(sweep: Path) -> dict[str, tuple[float, float]]:
    """Each trial's (start, end) wall time from Ray's ``result.json``: its first report less that epoch's
    and the set-up's seconds, to its last report. Ray's timestamps are whole seconds (floored), so a window is
    taken 1 s shorter at its start: two trials one after the other on one actor never seem to overlap."""
    windows = {}
    for result in sweep.glob("trial_*/result.json"):
        rows = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
        if rows:
            first = rows[0]
            start = first["timestamp"] + 1 - first.get("time_this_iter_s", 0.0) - (first.get("setup_s") or 0.0)
            if rows[-1]["timestamp"] > start:
                windows[result.parent.name.removeprefix("trial_")] = (start, float(rows[-1]["timestamp"]))
    return windows


def most_at_once(windows: list[tuple[float, float]]) -> int:
    """The largest number of (start, end) windows that overlap at one time (an end before a start)."""
    events = sorted([(s, 1) for s, _ in windows] + [(e, -1) for _, e in windows], key=lambda x: (x[0], x[1]))
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def figures(sweep: Path, wall: float, samples: list[Sample], gpus_per_trial: float) -> list[str]:
    import pandas as pd

    from analysis.costs import time_line
    from tune.trial.resources import allocator_cap

    lines: list[str] = []
    trials_file = sweep / "results" / "trials.parquet"
    if not trials_file.is_file():
        return [f"no trials.parquet under {sweep}: the sweep recorded no trial", "targets: NOT met (no trial)"]
    trials = pd.read_parquet(trials_file)
    epoch_files = sorted((sweep / "results" / "epochs").glob("*.parquet"))
    epochs = pd.concat([pd.read_parquet(f) for f in epoch_files]) if epoch_files else pd.DataFrame()
    counts = trials["status"].value_counts().to_dict()
    finished = sum(counts.get(s, 0) for s in ("completed", "stopped_early"))
    lines.append(f"trials: {len(trials)} ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))}), "
                 f"{len(epochs)} epochs in {wall:.0f} s")
    lines.append(f"trials per hour: {finished * 3600 / wall:.0f} finished (completed or stopped early); "
                 f"epochs per hour: {len(epochs) * 3600 / wall:.0f}")
    windows = trial_windows(sweep)
    at_once = most_at_once(list(windows.values()))
    on_gpu = max((len(s.apps) for s in samples), default=None)
    lines.append(f"at once: up to {at_once} trials training (Ray's reports)"
                 + ("" if on_gpu is None else f"; up to {on_gpu} processes on the GPU (nvidia-smi)"))
    busy = [s for s in samples if s.apps] or [s for s in samples if any(a <= s.time <= b for a, b in windows.values())]
    if samples:
        lines.append(f"GPU utilisation: {_mean([s.util for s in busy])} % while trials ran ({len(busy)} samples), "
                     f"{_mean([s.util for s in samples])} % over the whole part; memory used at most "
                     f"{max(s.used_mib for s in samples) / 1024:.1f} GiB of {samples[0].total_mib / 1024:.1f} GiB")
    held = None
    if samples and 0 < gpus_per_trial < 1:
        total_gib = samples[0].total_mib / 1024
        cap = allocator_cap(gpus_per_trial, int(total_gib * 2**30)) * total_gib
        peak = epochs["gpu_memory_peak_gib"].max() if "gpu_memory_peak_gib" in epochs else math.nan
        per_app = max((m for s in samples for m in s.apps.values()), default=math.nan) / 1024
        share = gpus_per_trial * total_gib
        held = bool(not peak > cap and not per_app > share)  # NaN (not measured) holds
        lines.append(f"memory: peak allocated per trial {_gib(peak)} (allocator cap {cap:.1f} GiB: "
                     f"{gpus_per_trial} of {total_gib:.1f} GiB less 1 GiB); a trial's process at most {_gib(per_app)} "
                     f"(share {share:.1f} GiB)")
    spent = time_line(trials)   # the line `xbm-tune status` prints
    if spent is not None:
        per_trial = f" (set-up {trials['setup_s'].mean():.1f} s a trial)" if "setup_s" in trials else ""
        lines.append(f"trials' {spent} of {trials['wall_time_s'].sum():.0f} s{per_trial}")
    for _, row in trials[trials["status"] == "failed"].iterrows():
        lines.append(f"failed: {row['trial_id']}: {str(row.get('error'))[:300]}")
    targets = [f"{finished} trial(s) finished: {'met' if finished else 'NOT met'}"]
    if samples:
        targets.append(f"2 trials on the GPU at once: {'met' if max(at_once, on_gpu or 0) >= 2 else 'NOT met'}")
    if held is not None:
        targets.append(f"memory caps held: {'met' if held else 'NOT met'}")
    lines.append("targets: " + "; ".join(targets))
    return lines


def _mean(values: list[float]) -> str:
    return f"{sum(values) / len(values):.0f}" if values else "n/a"


def _gib(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.1f} GiB"


# ---- the part ----------------------------------------------------------------------------------------
def run(out: Path, sweep: Path, gpus_per_trial: float, command: list[str]) -> int:
    """The sweep ``command`` with the GPU sampled, then the figures (module docstring)."""
    samples = out / "sweep_gpu.csv"
    sampler = (subprocess.Popen([sys.executable, __file__, "sample", str(samples)])
               if shutil.which("nvidia-smi") else None)
    stopped: list[float] = []
    handlers = {s: signal.signal(s, lambda *_: stopped.append(time.time())) for s in (signal.SIGINT, signal.SIGTERM)}
    start = time.time()
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        time.sleep(0.5)
        if stopped and proc.poll() is None:  # the signal reached its process group; tell the sweep if it did not
            waited = time.time() - stopped[0]
            if 5 < waited < 6:
                proc.send_signal(signal.SIGINT)
            if waited > 8:  # the figures now, from the Parquet written so far (timeout's KILL follows in 15 s)
                break
    wall = time.time() - start
    if sampler is not None:
        sampler.terminate()
        sampler.wait()
    if (sweep / "results").is_dir():
        shutil.copytree(sweep / "results", out / "sweep_results", dirs_exist_ok=True)
    status = "still stopping" if proc.poll() is None else f"exit status {proc.returncode}"
    print(f"\nsweep command: {status}{' (stopped by a signal)' if stopped else ''}, {wall:.0f} s; its Parquet copied "
          f"to {out / 'sweep_results'}", flush=True)
    for line in figures(sweep, max(wall, 1.0), read_samples(samples), gpus_per_trial):
        print(line, flush=True)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.wait()
    for s, handler in handlers.items():
        signal.signal(s, handler)
    return proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--sweep", type=Path, required=True, help="the sweep's folder (<storage>/<name>)")
    r.add_argument("--gpus-per-trial", type=float, default=0.0)
    r.add_argument("sweep_command", nargs=argparse.REMAINDER, help="-- then the sweep's command")
    s = sub.add_parser("sample")
    s.add_argument("file", type=Path)
    f = sub.add_parser("figures")
    f.add_argument("sweep", type=Path)
    f.add_argument("--wall", type=float, required=True, help="the sweep's wall time, seconds")
    f.add_argument("--samples", type=Path, default=None)
    f.add_argument("--gpus-per-trial", type=float, default=0.0)
    args = parser.parse_args()
    if args.command == "run":
        command = args.sweep_command[1:] if args.sweep_command[:1] == ["--"] else args.sweep_command
        return run(args.out, args.sweep, args.gpus_per_trial, command)
    if args.command == "sample":
        sample(args.file)
        return 0
    for line in figures(args.sweep, max(args.wall, 1.0), read_samples(args.samples), args.gpus_per_trial):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
