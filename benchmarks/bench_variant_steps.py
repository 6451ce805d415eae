"""What one training step costs under each memory variant, on the Omniglot study's choice, side by side in one run.

The study (docs/studies/omniglot_oneshot.md) logged PC-XBN epochs at about twice XBM's, with no memory and XBN
in between, while a step bench without the model put PC-XBN at +86 ms over a 233 ms SupCon step. This runs the
real trainer step (``Trainer.train_epoch``: model, miner, SupCon, memory, normaliser, optimiser) of
``docs/studies/omniglot_oneshot/chosen.yaml`` with only the memory changed (none, XBM, XBN, PC-XBN), the memory
filled first (``memory.prefill``: every step sees the full ~17,700 rows), in one process on one thread (the
process's CPU time counts only its own work on a shared machine), and prints the CPU milliseconds per step of each
beside XBM's, with the operators that took the most time (torch.profiler) under ``--profile``.

    OMP_NUM_THREADS=1 python benchmarks/bench_variant_steps.py --data-root ../shared/datasets/omniglot_small
"""
from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import torch
import yaml

from xbm.config import TrainConfig
from xbm.trainer import Trainer

CHOSEN = Path(__file__).resolve().parents[1] / "docs/studies/omniglot_oneshot/chosen.yaml"
#: each variant is the choice with only its memory changed (as the study's ``variant_sets``)
VARIANTS = {"none": {"memory.enabled": False}, "xbm": {}, "xbn": {"normaliser.kind": "xbn"},
            "pcxbn": {"normaliser.kind": "pcxbn"}}


def step_cpu_ms(config: dict, steps: int, warm_steps: int, profile: bool) -> tuple[float, int, str]:
    """CPU ms per training step after ``warm_steps`` (memory prefilled), the memory's rows, and the profile table."""
    budget = [warm_steps]
    trainer = Trainer(TrainConfig.from_dict(config), progress=lambda batches, _: itertools.islice(batches, budget[0]))
    trainer.train_epoch(1)   # fills the memory (prefill), then warm steps
    budget[0] = steps
    table = ""
    start = time.process_time()
    if profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            trainer.train_epoch(2)
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=50)
    else:
        trainer.train_epoch(2)
    cpu = time.process_time() - start
    rows = len(trainer.xbm.memory) if trainer.xbm is not None else 0
    return 1000 * cpu / steps, rows, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", required=True, help="omniglot_small's folder (images_background/)")
    parser.add_argument("--steps", type=int, default=15, help="timed steps per variant (default 15)")
    parser.add_argument("--warm-steps", type=int, default=5, help="untimed steps first (default 5)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of " + ", ".join(VARIANTS))
    parser.add_argument("--profile", action="store_true", help="print each variant's top operators")
    args = parser.parse_args()
    torch.set_num_threads(1)
    base = {**yaml.safe_load(CHOSEN.read_text()), "data_root": args.data_root, "num_workers": 0,
            "prefetch_next_epoch": False, "memory.prefill": True, "seed": 1}
    results = {}
    for name in args.variants.split(","):
        ms, rows, table = step_cpu_ms({**base, **VARIANTS[name]}, args.steps, args.warm_steps, args.profile)
        results[name] = ms
        print(f"{name:6s} {ms:7.0f} ms CPU / step   memory rows {rows}", flush=True)
        if table:
            print(table, flush=True)
    if "xbm" in results:
        print("vs XBM: " + ", ".join(f"{name} {ms / results['xbm']:.2f}x" for name, ms in results.items()))


if __name__ == "__main__":
    main()
