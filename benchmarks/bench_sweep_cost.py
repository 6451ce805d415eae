"""Where an ASHA sweep's time goes on this machine: the training fraction, before and after (issue 18).

Runs an ASHA sweep of the ``omniglot_small`` space (resnet18 at 32 px on ../shared/datasets/omniglot_small)
with the normaliser kind x memory ratio grid below, 9 epochs, grace period 1, reduction factor 3, the
default warm-up (the shipped space pins ``warmup_epochs: 0``; the derived space drops it), through
``xbm-tune sweep``, and prints the **training fraction**: seconds inside training passes / the trials'
wall time, summed over the sweep and over the trials stopped at the first rung.

    python benchmarks/bench_sweep_cost.py                      # this checkout: 9 trials x up to 9 epochs
    python benchmarks/bench_sweep_cost.py --against REV        # REV's sweep, then this one, side by side
    python benchmarks/bench_sweep_cost.py --quick --against HEAD   # 3 trials x up to 3 epochs: a smoke run

**One instrument on both sides.** Old revisions have no ``train_s`` column, so the time in training passes
is measured from outside: ``benchmarks/train_timing/sitecustomize.py``, put on the sweep's
``PYTHONPATH``, wraps ``xbm.trainer.Trainer.train_epoch`` (present at every revision) in every trial
process and appends each call's seconds, keyed by Tune's trial id, to a file per process. The wall time
per trial is trials.parquet's ``wall_time_s`` (Tune's ``time_total_s`` at the trial's last report), also
present at old revisions. The warm-up is not a training pass (``setup_s`` in the issue's terms).

**Warm page cache on both sides.** Before the first sweep, one untimed process imports the libraries a trial
loads (torch, torchvision, timm, pytorch-metric-learning, Ray Tune) and reads the data set's files. Without it
the first sweep's first trials read those from disk (cold imports took 8.6 s against 4.8 s warm here), so
with ``--against`` the revision that runs first, REV, would pay for both.

**A fresh sweep each time.** Trials reuse the references and warm-up stored under the sweep's name on the node
(``xbm.training.reuse.default_folder``), and every run here is named ``cost``: the folder is emptied before each
sweep, so that a second run does not read the first one's entries and pay nothing for them.

``--against REV``: REV is checked out with ``git worktree`` into a temporary folder and its sweep runs
there with ``PYTHONPATH`` pointing at it (the shared virtual environment's packages, REV's code); then
this checkout's sweep runs the same derived space file. The two sweeps run one after the other, not at
once: on 2 shared cores concurrent sweeps would steal each other's time.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from xbm.training.reuse import default_folder

ROOT = Path(__file__).resolve().parents[1]
TIMING = Path(__file__).resolve().parent / "train_timing"
DATA = ROOT.parent / "shared" / "datasets" / "omniglot_small"
SPACE = ROOT / "search_spaces" / "omniglot_small.yaml"
KINDS, RATIOS, EPOCHS = ("none", "xbn", "pcxbn"), (0.2, 0.5, 1.0), 9  # 3 x 3 = 9 trials
QUICK_KINDS, QUICK_RATIOS, QUICK_EPOCHS = ("none", "xbn", "pcxbn"), (1.0,), 3
GRACE, REDUCTION = 1, 3
NAME = "cost"   # the sweeps' name, and so their reuse folder's
REUSE = Path(default_folder(NAME))
TARGET_SWEEP, TARGET_FIRST_RUNG = 0.85, 0.75


def derived_space(kinds, ratios, epochs: int) -> str:
    """omniglot_small's base with the default warm-up and ``epochs``, sweeping kind x ratio on a grid."""
    space = yaml.safe_load(SPACE.read_text())
    base = {k: v for k, v in space["base"].items() if k not in ("warmup_epochs", "memory.ratio")}
    base["epochs"] = epochs
    return yaml.safe_dump({
        "description": "bench_sweep_cost.py: omniglot_small with the default warm-up, normaliser kind x memory ratio",
        "base": base,
        "params": {"normaliser.kind": {"grid": list(kinds)}, "memory.ratio": {"grid": list(ratios)}},
    }, sort_keys=False)


def read_durations(folder: Path) -> dict[str, float]:
    """Seconds in ``Trainer.train_epoch`` per trial id, from the instrument's files."""
    seconds: dict[str, float] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record["trial_id"] is not None:
                seconds[record["trial_id"]] = seconds.get(record["trial_id"], 0.0) + record["seconds"]
    return seconds


def training_fractions(trials: list[dict], train_s: dict[str, float], grace: int) -> dict:
    """The sweep's and the first-rung trials' training fractions (pooled: sum of training seconds / sum of
    wall seconds), and each trial's. ``trials``: trials.parquet rows (trial_id, status, epochs_completed,
    wall_time_s). A trial without a timed training pass means the instrument missed the trainer: an error,
    not a fraction of 0."""
    missing = [t["trial_id"] for t in trials if t["trial_id"] not in train_s]
    if missing:
        raise ValueError(f"every trial needs timed training passes, but {len(missing)} of {len(trials)} have none "
                         f"(e.g. {missing[0]}): Trainer.train_epoch was not called through the instrument "
                         f"(benchmarks/train_timing/sitecustomize.py) at this revision")
    if any(t["wall_time_s"] is None or not t["wall_time_s"] > 0 for t in trials):
        raise ValueError("every trial needs wall_time_s > 0 in trials.parquet, but got "
                         f"{[t['wall_time_s'] for t in trials]}")
    per_trial = {t["trial_id"]: train_s[t["trial_id"]] / t["wall_time_s"] for t in trials}
    first = [t for t in trials if t["status"] == "stopped_early" and t["epochs_completed"] == grace]

    def pooled(rows):
        return sum(train_s[t["trial_id"]] for t in rows) / sum(t["wall_time_s"] for t in rows) if rows else float("nan")

    return {"sweep": pooled(trials), "first_rung": pooled(first), "first_rung_trials": len(first),
            "first_rung_range": (min(per_trial[t["trial_id"]] for t in first),
                                 max(per_trial[t["trial_id"]] for t in first)) if first else None,
            "per_trial": per_trial, "trials": len(trials)}


def warm_page_cache() -> None:
    """Read what every trial process reads first (module docstring), untimed."""
    subprocess.run([sys.executable, "-c", "import torch, torchvision, timm, ray.tune, "
                    "pytorch_metric_learning.losses, pytorch_metric_learning.samplers"], check=True)
    for path in sorted(p for p in DATA.rglob("*") if p.is_file()):
        with open(path, "rb") as data:
            while data.read(1 << 24):
                pass


def run_sweep(checkout: Path, label: str, space_file: Path, epochs: int, work: Path) -> dict:
    """``xbm-tune sweep`` of ``space_file`` with ``checkout``'s code; the trials' rows and training seconds."""
    times, storage, log = work / f"times-{label}", work / f"sweeps-{label}", work / f"{label}.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), str(TIMING)]),
           "XBM_TRAIN_TIMES_DIR": str(times)}
    command = [sys.executable, "-m", "tune.cli", "sweep", str(space_file), "--search", "grid",
               "--scheduler", "asha", "--max-epochs", str(epochs), "--grace-period", str(GRACE),
               "--reduction-factor", str(REDUCTION), "--storage", str(storage), "--name", NAME,
               "--no-dashboard", "--set", f"data_root={DATA}"]
    shutil.rmtree(REUSE, ignore_errors=True)   # module docstring: a fresh sweep each time
    print(f"[{label}] sweep running ({checkout}); log: {log}", flush=True)
    start = time.perf_counter()
    with open(log, "w") as out:
        status = subprocess.run(command, cwd=checkout, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    elapsed = time.perf_counter() - start
    table = storage / NAME / "results" / "trials.parquet"
    if status != 0 or not table.is_file():
        tail = "\n".join(log.read_text().splitlines()[-40:])
        raise SystemExit(f"[{label}] the sweep failed (exit {status}); last lines of {log}:\n{tail}")
    columns = ["trial_id", "status", "epochs_completed", "wall_time_s", "config.normaliser.kind", "config.memory.ratio"]
    rows = pq.read_table(table).select(columns).to_pylist()
    result = training_fractions(rows, read_durations(times), GRACE)
    result.update(rows=rows, elapsed=elapsed, train_s=read_durations(times))
    return result


def print_trials(label: str, result: dict) -> None:
    print(f"[{label}] {'trial':<12} {'kind':>6} {'ratio':>6} {'status':>14} {'epochs':>6} {'train s':>8} "
          f"{'wall s':>8} {'fraction':>8}")
    for row in sorted(result["rows"], key=lambda r: r["trial_id"]):
        tid = row["trial_id"]
        print(f"[{label}] {tid[-12:]:<12} {row['config.normaliser.kind']:>6} {row['config.memory.ratio']:>6.2f} "
              f"{row['status']:>14} {row['epochs_completed']:>6} {result['train_s'][tid]:8.1f} "
              f"{row['wall_time_s']:8.1f} {result['per_trial'][tid]:8.2f}")


def print_summary(results: dict[str, dict]) -> None:
    names, w = list(results), 20
    print("\ntraining fraction = seconds in Trainer.train_epoch / trials.parquet wall_time_s (same instrument "
          "for every column); first rung: pooled (lowest-highest trial)")
    print(f"{'':<28}" + "".join(f"{n[:w - 2]:>{w}}" for n in names) + f"{'target':>10}")
    print(f"{'whole sweep':<28}" + "".join(f"{results[n]['sweep']:{w}.2f}" for n in names)
          + f"{'>= ' + str(TARGET_SWEEP):>10}")

    def first(r):
        low_high = r["first_rung_range"]
        spread = f" ({low_high[0]:.2f}-{low_high[1]:.2f})" if low_high else ""
        return f"{r['first_rung']:.2f}{spread}"

    print(f"{'stopped at the first rung':<28}" + "".join(f"{first(results[n]):>{w}}" for n in names)
          + f"{'>= ' + str(TARGET_FIRST_RUNG):>10}")
    print(f"{'  (trials)':<28}" + "".join(f"{results[n]['first_rung_trials']:>{w}}" for n in names))
    print(f"{'trials':<28}" + "".join(f"{results[n]['trials']:>{w}}" for n in names))
    print(f"{'sweep command, wall s':<28}" + "".join(f"{results[n]['elapsed']:{w}.0f}" for n in names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", metavar="REV", help="also run git revision REV's sweep, first, and compare")
    parser.add_argument("--quick", action="store_true",
                        help=f"{len(QUICK_KINDS) * len(QUICK_RATIOS)} trials x up to {QUICK_EPOCHS} epochs (smoke run)")
    parser.add_argument("--keep", metavar="DIR", help="keep the sweeps, logs and timings in DIR (default: a temp folder)")
    args = parser.parse_args()
    if not (DATA / "README.md").is_file() and not any(DATA.glob("*.zip")):
        raise SystemExit(f"bench_sweep_cost.py needs the Omniglot copy at {DATA} (../shared/datasets/omniglot_small "
                         "beside the repository: images_background_small1.zip, images_background_small2.zip); "
                         "it is absent, so put it there (or link it) and run again")
    kinds, ratios, epochs = (QUICK_KINDS, QUICK_RATIOS, QUICK_EPOCHS) if args.quick else (KINDS, RATIOS, EPOCHS)
    work = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="bench_sweep_cost_"))
    work.mkdir(parents=True, exist_ok=True)
    space_file = work / "omniglot_small_cost.yaml"
    space_file.write_text(derived_space(kinds, ratios, epochs))
    print(f"{len(kinds) * len(ratios)} trials (normaliser.kind {list(kinds)} x memory.ratio {list(ratios)}), "
          f"up to {epochs} epochs, ASHA grace period {GRACE}, reduction factor {REDUCTION}, default warm-up; "
          f"files in {work}", flush=True)
    results: dict[str, dict] = {}
    revision = work / "revision"
    warm_page_cache()
    try:
        if args.against:
            sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{args.against}^{{commit}}"],
                                 capture_output=True, text=True, check=True).stdout.strip()
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(revision), sha],
                           capture_output=True, text=True, check=True)
            results[f"{args.against[:9]} {sha[:8]}"] = run_sweep(revision, "rev", space_file, epochs, work)
        results["this checkout"] = run_sweep(ROOT, "this", space_file, epochs, work)
    finally:
        if revision.exists():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(revision)], capture_output=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for label, result in results.items():
        print_trials(label, result)
    print_summary(results)


if __name__ == "__main__":
    main()
