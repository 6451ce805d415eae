"""Driver cost of the Parquet sink (tune/results/sink.py) as a sweep grows to thousands of trials (issue 9).

The sink runs on Tune's driver, inside Tune's event loop: whatever it spends per result delays every
trial's next step. This drives the real ``ParquetSink`` with synthetic results (no Ray, no training) of a
sweep of ``--trials`` trials x ``--epochs`` epochs, ``--concurrent`` running at once (round-robin, as
Tune interleaves them), each started, reporting every epoch and completing, a quarter of them stopped
early at a third of their budget (as ASHA would), into a local results folder.

It measures the driver time per result (every sink call, Tune's step end included, charged to the
result stream) over the last 100 trials while the sweep holds 100, 500 and 2,000 trials. The trials
before that window are already in the folder as finished rows of trials.parquet (written once, as the
sink leaves them; their epoch files play no part in the sink's per-result work, and a sink that
rewrites trials.parquet carries every one of them). It prints the ratio of the 2,000-trial figure to
the 100-trial one (target <= 1.5x), every figure (target < 5 ms), and one whole trials.parquet rewrite
at each size.

    python benchmarks/bench_sink.py              # windows at 100, 500, 2,000 trials x 20 epochs
    python benchmarks/bench_sink.py --quick      # windows at 100, 500 trials x 5 epochs
    python benchmarks/bench_sink.py --against REV [--repeats 5]   # this sink vs git REV's, interleaved

``--against``: a shared, loaded machine moves CPU time per result by +-20% from one minute to the next,
more than a code change does, so two runs of the script minutes apart compare badly. This prepares each
window's folder once, then alternates the two sinks (REV's ``tune/results/sink.py`` and ``tune/results/parquet.py``,
imported beside this checkout's; the order swapped every repetition) on copies of it in one process,
and prints CPU medians and the paired ratios.
"""
from __future__ import annotations

import argparse
import importlib
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402

from tune.results.parquet import build_table  # noqa: E402

from analysis.location import Folder
from tune.results.sink import ParquetSink  # noqa: E402

BASE = {"dataset": "toy", "model": "mlp", "embedding_size": 32, "warmup_epochs": 0, "batch_size": 32,
        "samples_per_class": 4, "seed": 0}
KINDS = ("none", "xbn", "axbn", "pcxbn", "scxbn", "ema")
#: the trainer's per-epoch metrics (README "Parquet results"), as floats
METRICS = ("loss", "lr", "recall_at_1", "recall_at_10", "map_at_r", "r_precision", "drift_mean", "drift_max",
           "staleness_mean", "inter_distance_mean", "intra_distance_mean", "superclass_neighbour_share",
           "memory_neg_pairs", "batch_neg_pairs", "memory_fill", "epoch_time_s", "images_per_s")


SWEPT = ("normaliser.kind", "memory.ratio", "lr", "normaliser.lambda_mu")
PROVENANCE = {"git_sha": "0" * 40, "package_version": "0.1.0"}


class FakeTrial(SimpleNamespace):
    """The attributes of ``ray.tune.experiment.Trial`` the sink reads."""

    def __init__(self, trial_id: str, config: dict) -> None:
        super().__init__(trial_id=trial_id, config=config, num_failures=0, last_result={},
                         placement_group_factory=SimpleNamespace(required_resources={"CPU": 1.0, "GPU": 0.5}))

    def get_error(self):
        return None

    def __str__(self) -> str:
        return f"XbmTrial_{self.trial_id}"


def make_trials(count: int, epochs: int, rng: np.random.Generator) -> list[FakeTrial]:
    trials = []
    for i in range(count):
        kind = str(KINDS[i % len(KINDS)])
        config = {**BASE, "epochs": epochs, "normaliser.kind": kind,
                  "memory.ratio": float(np.exp(rng.uniform(np.log(0.05), 0.0))),
                  "lr": float(np.exp(rng.uniform(np.log(1e-4), np.log(1e-2)))),
                  "normaliser.lambda_mu": float(rng.uniform()) if kind in ("pcxbn", "scxbn") else None}
        trials.append(FakeTrial(f"{i:05d}_{rng.integers(1 << 30):08x}", config))
    return trials


def epoch_result(trial: FakeTrial, epoch: int, rng: np.random.Generator) -> dict:
    metrics = {name: float(rng.uniform()) for name in METRICS}
    metrics["drift_mean"] = math.nan if epoch == 1 else metrics["drift_mean"]
    return {**metrics, "epoch": epoch, "eval_split": "val", "node_id": "node-1", "gpu_ids": "0",
            "time_total_s": 3.0 * epoch, "training_iteration": epoch, "pid": 4242, "done": False,
            "trial_id": trial.trial_id, "config": trial.config}


def drive(sink: ParquetSink, trials: list[FakeTrial], epochs: int, concurrent: int,
          rng: np.random.Generator) -> tuple[float, float, int]:
    """Feed ``trials`` through ``sink``; (wall s, CPU s) of every sink call, and the results reported."""
    budget = {t.trial_id: (max(1, epochs // 3) if i % 4 == 3 else epochs) for i, t in enumerate(trials)}
    pending, running = list(reversed(trials)), []
    wall = cpu = 0.0
    results = 0

    def timed(call, *args) -> None:
        nonlocal wall, cpu
        w, c = time.perf_counter(), time.process_time()
        call(*args)
        wall += time.perf_counter() - w
        cpu += time.process_time() - c

    while pending or running:
        while pending and len(running) < concurrent:
            trial = pending.pop()
            timed(sink.on_trial_start, 0, [], trial)
            running.append([trial, 0])
        for slot in list(running):
            trial, done = slot
            result = epoch_result(trial, done + 1, rng)
            trial.last_result = result
            timed(sink.on_trial_result, 0, [], trial, result)
            timed(sink.on_step_end, 0, [])  # Tune's loop ends a step after each event
            results += 1
            slot[1] = done + 1
            if slot[1] >= budget[trial.trial_id]:
                timed(sink.on_trial_complete, 0, [], trial)
                running.remove(slot)
    timed(sink.on_experiment_end, [])
    return wall, cpu, results


def finished_rows(sink: ParquetSink, trials: list[FakeTrial], epochs: int, rng: np.random.Generator) -> list[dict]:
    """trials.parquet rows of finished trials, as the sink writes them (its own config columns)."""
    rows = []
    for trial in trials:
        best = float(rng.uniform())
        rows.append({"experiment": "bench", "stage": "sweep", "trial_id": trial.trial_id, "trial_name": str(trial),
                     "status": "completed", "stop_reason": f"reached the epoch budget ({epochs})", "error": None,
                     "epochs_completed": epochs, "best_recall_at_1": best, "final_recall_at_1": best,
                     "best_epoch": epochs, "best_map_at_r": best / 2, "final_map_at_r": best / 2,
                     "wall_time_s": 3.0 * epochs, "gpu_hours": 1.5 * epochs / 3600, "retries": 0, "seed": 0,
                     "node_id": "node-1", "gpu_ids": "0", **sink.provenance, **sink._config_columns(trial.config)})
    return rows


def window(root: str, held: int, trials: list[FakeTrial], epochs: int, concurrent: int, rng) -> dict:
    """Per-result cost of the last 100 trials while the sweep holds ``held``; one rewrite at that size."""
    sink = ParquetSink(f"{root}/w{held}/results", "bench", "recall_at_1", "max", swept=SWEPT, provenance=PROVENANCE)
    earlier, last = trials[:held - 100], trials[held - 100:held]
    if earlier:
        sink.metric_types = {"recall_at_1": pa.float64(), "map_at_r": pa.float64()}
        Folder(f"{root}/w{held}/results").write_table(
            "trials.parquet", build_table(finished_rows(sink, earlier, epochs, rng), sink.trial_fields()))
    sink.setup()  # loads those rows, as on a resumed sweep
    wall, cpu, results = drive(sink, last, epochs, concurrent, rng)
    rewrites = []
    for _ in range(5):
        start = time.process_time()
        sink._write_trials()
        rewrites.append(time.process_time() - start)
    assert len(sink.trials) == held
    return {"wall": 1e3 * wall / results, "cpu": 1e3 * cpu / results, "results": results,
            "rewrite": 1e3 * float(np.median(rewrites))}


def sink_at(rev: str, folder: str) -> type:
    """``ParquetSink`` as of git revision ``rev``: its sink.py and parquet.py (under tune/results/, or tune/ before the
    layout moved) written to a package ``tune_at_rev`` under ``folder`` (the rest of ``tune`` and ``xbm`` is this
    checkout's, so a revision from before the layout move fails on its old imports)."""
    package = Path(folder) / "tune_at_rev"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in ("sink", "parquet"):
        shown = [subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{home}/{name}.py"], capture_output=True,
                                text=True) for home in ("tune/results", "tune")]
        text = next((run.stdout for run in shown if run.returncode == 0), None)
        if text is None:
            raise SystemExit(f"revision {rev} has no tune/results/{name}.py nor tune/{name}.py")
        for old in ("tune.results.parquet", "tune.parquet"):
            text = text.replace(f"from {old} import", "from tune_at_rev.parquet import")
        (package / f"{name}.py").write_text(text)
    sys.path.insert(0, folder)
    return importlib.import_module("tune_at_rev.sink").ParquetSink


def against(rev: str, marks, trials, epochs: int, concurrent: int, repeats: int) -> None:
    """REV's sink and this one on the same windows, alternated; CPU ms per result, medians and pairs."""
    cpu: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_sink_") as root:
        sinks = {rev: sink_at(rev, root), "this": ParquetSink}
        for held in marks:  # the N-100 finished rows, written once (as window() does)
            Path(f"{root}/base{held}").mkdir()
            if held > 100:
                prep = ParquetSink(None, "bench", "recall_at_1", "max", swept=SWEPT, provenance=PROVENANCE)
                prep.metric_types = {"recall_at_1": pa.float64(), "map_at_r": pa.float64()}
                Folder(f"{root}/base{held}").write_table("trials.parquet", build_table(
                    finished_rows(prep, trials[:held - 100], epochs, np.random.default_rng(1)), prep.trial_fields()))
        for rep in range(repeats):
            for held in marks:
                for name in (rev, "this") if rep % 2 == 0 else ("this", rev):
                    folder = f"{root}/{rep}_{held}_{len(cpu)}"
                    shutil.copytree(f"{root}/base{held}", folder)
                    sink = sinks[name](folder, "bench", "recall_at_1", "max", swept=SWEPT, provenance=PROVENANCE)
                    sink.setup()
                    for trial in trials:
                        trial.last_result = {}
                    _, seconds, results = drive(sink, trials[held - 100:held], epochs, concurrent,
                                                np.random.default_rng(held))  # the same results for both
                    assert len(sink.trials) == held
                    cpu.setdefault((name, held), []).append(1e3 * seconds / results)
                    shutil.rmtree(folder)
    print(f"CPU ms per result, last 100 trials x {epochs} epochs of a sweep holding N trials; medians of {repeats} "
          f"interleaved runs per sink; 'lower' = repetitions where this sink was cheaper")
    print(f"{'N trials':>9} {rev[:12]:>12} {'this':>8} {'this / rev':>11} {'lower':>6}")
    for held in marks:
        old, new = cpu[(rev, held)], cpu[("this", held)]
        print(f"{held:9d} {np.median(old):12.3f} {np.median(new):8.3f} {np.median(new) / np.median(old):10.2f}x "
              f"{sum(n < o for n, o in zip(new, old)):3d}/{repeats}")
    for name in (rev, "this"):
        ratio = np.median(cpu[(name, marks[-1])]) / np.median(cpu[(name, marks[0])])
        print(f"{name[:12]}: {marks[-1]} / {marks[0]} trials per result {ratio:.2f}x (target <= 1.5x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=8, help="trials running at once (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="windows at 100 and 500 trials x 5 epochs")
    parser.add_argument("--against", metavar="REV", help="compare with the sink of git revision REV, interleaved")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each window per sink with --against")
    args = parser.parse_args()
    marks, epochs = ((100, 500), 5) if args.quick else ((100, 500, 2000), args.epochs)
    rng = np.random.default_rng(0)
    trials = make_trials(max(marks), epochs, rng)
    if args.against:
        return against(args.against, marks, trials, epochs, args.concurrent, args.repeats)
    with tempfile.TemporaryDirectory(prefix="bench_sink_") as root:
        figures = {held: window(root, held, trials, epochs, args.concurrent, rng) for held in marks}
    interval = ParquetSink(None, "x", "recall_at_1", "max").trials_interval_s
    print(f"Parquet sink driver cost per result: last 100 trials x {epochs} epochs ({args.concurrent} at once, "
          f"a quarter stopped at a third) of a sweep holding N trials; trials_interval_s={interval}")
    print(f"{'N trials':>9} {'wall ms/result':>15} {'CPU ms/result':>14} {'results':>8} {'one trials.parquet rewrite, CPU ms':>35}")
    for held, f in figures.items():
        print(f"{held:9d} {f['wall']:15.3f} {f['cpu']:14.3f} {f['results']:8d} {f['rewrite']:35.1f}")
    first, last = figures[marks[0]], figures[marks[-1]]
    print(f"{marks[-1]} / {marks[0]} trials per result: wall {last['wall'] / first['wall']:.2f}x, CPU "
          f"{last['cpu'] / first['cpu']:.2f}x (target <= 1.5x); largest wall {max(f['wall'] for f in figures.values()):.2f} ms, "
          f"CPU {max(f['cpu'] for f in figures.values()):.2f} ms (target < 5 ms)")


if __name__ == "__main__":
    main()
