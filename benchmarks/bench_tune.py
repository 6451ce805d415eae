"""Sweep-layer benchmarks on the CPU toy trainable (issue 4), measured side by side in one run.

1. Overhead: Tune's wall time for 16 toy trials (one at a time, reused actor, checkpoint every epoch,
   Parquet sink on) over the sum of the trials' own compute (Tune's ``time_total_s`` per trial: the
   time inside the trainable, imports and trainer construction included). Target <= 1.15.
2. ASHA against FIFO on the same 27 seeded configurations (normaliser kind, memory ratio, lr):
   share of epochs ASHA consumed (target <= 40%) and ASHA's best final Recall@1 (trials that ran the
   full budget) relative to FIFO's best (target >= 98%). Configs and per-trial seeds are identical in
   both runs, so a configuration learns the same curve under both schedulers (CPU is deterministic).

    python benchmarks/bench_tune.py            # full: 16 x 5 epochs; 27 configs x 9 epochs
    python benchmarks/bench_tune.py --quick    # sanity: 6 x 3 epochs; 9 configs x 3 epochs
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402
from ray import tune as ray_tune  # noqa: E402

from analysis.location import Folder
from tune.driver.options import SweepOptions  # noqa: E402
from tune.driver.sweep import resolved_resources, trainable  # noqa: E402
from tune.results.sink import ParquetSink  # noqa: E402
from tune.search.schedulers import build_scheduler  # noqa: E402
from tune.search.searchers import FixedConfigs  # noqa: E402

# the quickstart space's trial (search_spaces/quickstart.yaml) without its head-only warm-up epoch
TOY = {"dataset": "toy", "model": "mlp", "embedding_size": 32, "warmup_epochs": 0, "batch_size": 32,
       "samples_per_class": 4, "val_fraction": 0.2, "seed": 0}
KINDS = ("none", "xbn", "axbn", "pcxbn")


def configs(count: int, epochs: int, seed: int = 0) -> list[dict]:
    """``count`` seeded random configurations (the quickstart's parameters plus lr)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        kind = str(rng.choice(KINDS))
        config = {**TOY, "epochs": epochs, "normaliser.kind": kind,
                  "memory.ratio": float(np.exp(rng.uniform(np.log(0.05), np.log(1.0)))),
                  "lr": float(np.exp(rng.uniform(np.log(1e-4), np.log(1e-2))))}
        if kind == "pcxbn":
            config["normaliser.lambda_mu"] = float(rng.uniform(0, 1))
        out.append(config)
    return out


def fit(configs_: list[dict], scheduler: str, root: str, name: str, max_epochs: int):
    """Run ``configs_`` one at a time through the sweep's trainable, scheduler and Parquet sink."""
    options = SweepOptions(scheduler=scheduler, grace_period=1, reduction_factor=3, max_concurrent=1,
                           dashboard=False)
    sink = ParquetSink(None, name, "recall_at_1", "max",
                       swept=("normaliser.kind", "memory.ratio", "lr", "normaliser.lambda_mu"))
    tuner = ray_tune.Tuner(
        trainable(resolved_resources(options)),
        tune_config=ray_tune.TuneConfig(
            metric="recall_at_1", mode="max", search_alg=FixedConfigs(configs_, "recall_at_1", "max"),
            scheduler=build_scheduler(options, max_epochs, sink.stop_reasons), num_samples=len(configs_),
            max_concurrent_trials=1, reuse_actors=True),
        run_config=ray_tune.RunConfig(name=name, storage_path=root, callbacks=[sink], verbose=0,
                                  checkpoint_config=ray_tune.CheckpointConfig(num_to_keep=1)))
    start = time.perf_counter()
    tuner.fit()
    wall = time.perf_counter() - start
    trials = Folder(f"{root}/{name}/results").read_table("trials.parquet").to_pandas()
    return wall, trials


BARE = """
import json, sys, time
start = time.perf_counter()
from tune.results.trial_config import train_config
from xbm.trainer import Trainer
from xbm.training.rng import seed_everything
for config in json.loads(sys.argv[1]):
    cfg = train_config({**config, "device": "cpu"})
    seed_everything(cfg.seed)
    for _ in Trainer(cfg).fit():
        pass
print(time.perf_counter() - start)
"""


def bare(configs_: list[dict]) -> float:
    """The same trials run one after another by a plain Python process (imports once, no Ray)."""
    import json
    import subprocess

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", BARE, json.dumps(configs_)], cwd=root, check=True,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)})
    return float(out.stdout.strip().splitlines()[-1])


def overhead(root: str, count: int, epochs: int) -> float:
    same = configs(count, epochs, seed=1)
    wall, trials = fit(same, "fifo", root, "overhead", epochs)
    compute = float(trials.wall_time_s.sum())
    plain = bare(same)
    ratio = wall / compute
    print(f"overhead: {count} trials x {epochs} epochs, one at a time: Tune wall {wall:.1f} s, "
          f"sum of trial compute {compute:.1f} s, ratio {ratio:.3f} (target <= 1.15) "
          f"[{'ok' if ratio <= 1.15 else 'MISSED'}]")
    print(f"  same trials in a plain Python process (imports once, no Ray, no checkpoints): {plain:.1f} s; "
          f"Tune wall / plain = {wall / plain:.3f}")
    return ratio


def asha_vs_fifo(root: str, count: int, epochs: int) -> tuple[float, float]:
    same = configs(count, epochs, seed=2)
    fifo_wall, fifo = fit(same, "fifo", root, "fifo", epochs)
    asha_wall, asha = fit(same, "asha", root, "asha", epochs)
    share = asha.epochs_completed.sum() / fifo.epochs_completed.sum()
    full = asha[asha.epochs_completed == epochs]
    best_fifo = fifo.final_recall_at_1.max()
    best_asha = full.final_recall_at_1.max()
    relative = best_asha / best_fifo
    print(f"ASHA vs FIFO on the same {count} seeded configs, {epochs} epochs max (grace 1, factor 3):")
    print(f"  epochs consumed: ASHA {asha.epochs_completed.sum()} / FIFO {fifo.epochs_completed.sum()} "
          f"= {share:.1%} (target <= 40%) [{'ok' if share <= 0.40 else 'MISSED'}]")
    print(f"  best final Recall@1: ASHA {best_asha:.4f} ({len(full)} trials ran the full budget) / FIFO "
          f"{best_fifo:.4f} = {relative:.1%} (target >= 98%) [{'ok' if relative >= 0.98 else 'MISSED'}]")
    print(f"  wall time: ASHA {asha_wall:.1f} s, FIFO {fifo_wall:.1f} s ({asha_wall / fifo_wall:.1%})")
    return share, relative


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a fast sanity run with fewer, shorter trials")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"Ray {ray.__version__}, {os.cpu_count()} CPU core(s); toy trainable: the quickstart's trial (mlp, embedding 32, batch 32)")
    with tempfile.TemporaryDirectory(prefix="bench-tune-") as root:
        if args.quick:
            overhead(root, 6, 3)
            asha_vs_fifo(root, 9, 3)
        else:
            overhead(root, 16, 5)
            asha_vs_fifo(root, 27, 9)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
