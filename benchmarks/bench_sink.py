"""Driver cost of the Parquet sink (tune/sink.py) as a sweep grows to thousands of trials (issue 9).

The sink runs on Tune's driver, inside Tune's event loop: whatever it spends per result delays every
trial's next step. This drives the real ``ParquetSink`` with synthetic results (no Ray, no training):
``--trials`` trials x ``--epochs`` epochs, ``--concurrent`` trials running at once (round-robin, as
Tune interleaves them), each started, reporting every epoch and completing, a quarter of them stopped
early at a third of their budget (as ASHA would), into a local results folder.

It prints the driver time per result (every sink call charged to the result stream) while the sweep
holds 1-100, 401-500 and 1901-2000 trials, their ratio (target: the 2,000-trial figure <= 1.5x the
100-trial one, and every figure < 5 ms), and the cost of one whole ``trials.parquet`` rewrite at each
size (which the sink pays at most once per ``trials_interval_s``).

    python benchmarks/bench_sink.py              # 2,000 trials x 20 epochs (~3 minutes on 2 shared cores)
    python benchmarks/bench_sink.py --quick      # 500 trials x 5 epochs
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tune.sink import ParquetSink  # noqa: E402

BASE = {"dataset": "toy", "model": "mlp", "embedding_size": 32, "warmup_epochs": 0, "batch_size": 32,
        "samples_per_class": 4, "seed": 0}
KINDS = ("none", "xbn", "axbn", "pcxbn", "scxbn", "ema")
#: the trainer's per-epoch metrics (README "Parquet results"), as floats
METRICS = ("loss", "lr", "recall_at_1", "recall_at_10", "map_at_r", "r_precision", "drift_mean", "drift_max",
           "staleness_mean", "inter_distance_mean", "intra_distance_mean", "superclass_top_k",
           "memory_neg_pairs", "batch_neg_pairs", "memory_fill", "epoch_time_s", "images_per_s")


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
          rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feed every trial through the sink; return, per sink call, (wall s, CPU s, trials started so far)
    and the number of results reported while each count of started trials held."""
    sink.setup()
    budget = {t.trial_id: (max(1, epochs // 3) if i % 4 == 3 else epochs) for i, t in enumerate(trials)}
    pending, running, started = list(reversed(trials)), [], 0
    walls, cpus, at, results_at = [], [], [], np.zeros(len(trials) + 1, dtype=np.int64)

    def timed(call, *args) -> None:
        w, c = time.perf_counter(), time.process_time()
        call(*args)
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
        at.append(started)

    while pending or running:
        while pending and len(running) < concurrent:
            trial = pending.pop()
            started += 1
            timed(sink.on_trial_start, 0, [], trial)
            running.append([trial, 0])
        for slot in list(running):
            trial, done = slot
            result = epoch_result(trial, done + 1, rng)
            trial.last_result = result
            timed(sink.on_trial_result, 0, [], trial, result)
            timed(sink.on_step_end, 0, [])  # Tune's loop ends a step after each event
            results_at[started] += 1
            slot[1] = done + 1
            if slot[1] >= budget[trial.trial_id]:
                timed(sink.on_trial_complete, 0, [], trial)
                running.remove(slot)
    timed(sink.on_experiment_end, [])
    return np.array(walls), np.array(cpus), np.array(at), results_at


def window_cost(walls, cpus, at, results_at, low: int, high: int) -> tuple[float, float, int]:
    """Per-result wall and CPU ms of every sink call made while ``low < started <= high``."""
    mask = (at > low) & (at <= high)
    count = int(results_at[low + 1:high + 1].sum())
    return 1e3 * walls[mask].sum() / count, 1e3 * cpus[mask].sum() / count, count


def rewrite_cost(sink: ParquetSink, repeats: int = 5) -> float:
    """ms of one whole trials.parquet rewrite with the sink's current rows (median of ``repeats``)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sink._write_trials()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=8, help="trials running at once (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="500 trials x 5 epochs")
    args = parser.parse_args()
    trials_n, epochs = (500, 5) if args.quick else (args.trials, args.epochs)
    marks = [n for n in (100, 500, 2000) if n <= trials_n] or [trials_n]
    rng = np.random.default_rng(0)
    trials = make_trials(trials_n, epochs, rng)

    with tempfile.TemporaryDirectory(prefix="bench_sink_") as root:
        sink = ParquetSink(f"{root}/results", "bench", "recall_at_1", "max", swept=(
            "normaliser.kind", "memory.ratio", "lr", "normaliser.lambda_mu"),
            provenance={"git_sha": "0" * 40, "package_version": "0.1.0"})
        start = time.perf_counter()
        walls, cpus, at, results_at = drive(sink, trials, epochs, args.concurrent, rng)
        total = time.perf_counter() - start
        # the whole-file rewrite at each size, measured on the sink's own rows (a prefix of the trials)
        rows = dict(sink.trials)
        rewrites = {}
        for n in marks:
            sink.trials = dict(list(rows.items())[:n])
            rewrites[n] = rewrite_cost(sink)
        sink.trials = rows

        results = int(results_at.sum())
        print(f"Parquet sink driver cost: {trials_n} trials x {epochs} epochs, {args.concurrent} running at once, "
              f"{results} results in {total:.1f} s ({results / total:.0f} results/s driven), "
              f"trials_interval_s={sink.trials_interval_s}")
        print(f"{'trials held':>14} {'wall ms/result':>15} {'CPU ms/result':>14} {'results':>8} "
              f"{'one trials.parquet rewrite ms':>30}")
        first = None
        for n in marks:
            low = max(0, n - 100)
            wall, cpu, count = window_cost(walls, cpus, at, results_at, low, n)
            first = first or wall
            print(f"{f'{low + 1}-{n}':>14} {wall:15.3f} {cpu:14.3f} {count:8d} {rewrites[n]:30.1f}")
        last = window_cost(walls, cpus, at, results_at, max(0, marks[-1] - 100), marks[-1])[0]
        print(f"ratio {marks[-1]}-trial / {marks[0]}-trial per-result wall: {last / first:.2f}x (target <= 1.5x); "
              f"max {max(window_cost(walls, cpus, at, results_at, max(0, n - 100), n)[0] for n in marks):.2f} ms "
              f"(target < 5 ms); whole run {1e3 * walls.sum() / results:.3f} ms/result")


if __name__ == "__main__":
    main()
