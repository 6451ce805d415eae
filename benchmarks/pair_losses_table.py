"""The tables of docs/analysis.md's issue 21 study (pair losses with and without memory on Omniglot small).

Reads the 9 sweep folders the study writes under ROOT, one per (loss, memory variant), each a 1-config
sweep followed by ``xbm-tune confirm --top 1 --seeds 3``: ``<loss>-none`` (memory.enabled=false),
``<loss>-xbm`` (normaliser none) and ``<loss>-xbn``, with loss in contrastive, triplet, ms. Prints, per loss,
``analysis.compare_variants`` (test Recall@1 at the last epoch over seeds), the paired differences with memory
minus without (``analysis.compare.paired_differences``), the mean test Recall@1 and training loss per epoch,
and the collapse checks. Missing folders are said, not skipped silently.

    python benchmarks/pair_losses_table.py /work/study21_runs
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import analysis
from analysis.compare import paired_differences

LOSSES = {"contrastive": "contrastive", "triplet": "triplet", "ms": "multi_similarity"}
VARIANTS = {"no_memory": "none", "none": "xbm", "xbn": "xbn"}  # analysis label -> folder suffix
NAMES = {"no_memory": "no memory", "none": "XBM", "xbn": "XBN"}


def loss_tables(root: Path, prefix: str) -> None:
    folders = [root / f"{prefix}-{suffix}" for suffix in VARIANTS.values()]
    present = [f for f in folders if (f / "results" / "trials.parquet").exists()]
    for missing in sorted(set(folders) - set(present)):
        print(f"MISSING: {missing}")
    if not present:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sweep = analysis.load(present)
        table = analysis.compare_variants(sweep, "recall_at_1").table
        pairs = paired_differences(sweep, "recall_at_1")
    print(f"\n## {LOSSES[prefix]}\n\n| variant | n | test Recall@1 mean | 95% t-interval | seeds |\n| --- | --- | --- | --- | --- |")
    for r in table.itertuples():
        print(f"| {NAMES.get(r.variant, r.variant)} | {r.n} | {r.mean:.3f} | [{r.ci_low:.3f}, {r.ci_high:.3f}] | {r.seeds} |")
    print("\n| difference | n | mean | 95% interval | p |\n| --- | --- | --- | --- | --- |")
    for r in pairs.itertuples():
        sign = 1.0 if r.b == "no_memory" or (r.a != "no_memory" and r.b == "none") else -1.0  # memory - without
        a, b = (r.a, r.b) if sign > 0 else (r.b, r.a)
        low, high = sorted((sign * r.ci_low, sign * r.ci_high))
        print(f"| {NAMES.get(a, a)} - {NAMES.get(b, b)} | {r.n_pairs} | {sign * r.mean_diff:+.3f} | "
              f"[{low:+.3f}, {high:+.3f}] | {r.p_value:.3g} |")
    epochs = sweep.stage_epochs("confirm")
    done = epochs.dropna(subset=["test_recall_at_1"])
    curve = done.groupby(["variant", "epoch"])["test_recall_at_1"].mean().unstack()
    loss = epochs.groupby(["variant", "epoch"])["loss"].mean().unstack()
    print("\ntest Recall@1 per evaluated epoch (mean of seeds):")
    print(curve.round(3).to_string())
    print("\ntraining loss per epoch (mean of seeds):")
    print(loss.round(3).to_string())
    trials = sweep.stage_trials("confirm")
    print("\nchecks per variant (confirm runs):")
    for variant, rows in epochs.groupby("variant"):
        t = trials[trials["variant"] == variant]
        print(f"  {NAMES.get(variant, variant)}: runs {len(t)} ({(t['status'] == 'completed').sum()} completed), "
              f"collapsed_epochs {t['collapsed_epochs'].tolist()}, min loss_pos_pairs {rows['loss_pos_pairs'].min():.0f}, "
              f"min loss {rows['loss'].min():.4f}, val reference raw {rows['reference_raw_recall_at_1'].max():.3f} "
              f"untrained {rows['reference_untrained_recall_at_1'].max():.3f}, best val Recall@1 "
              f"{t['best_recall_at_1'].min():.3f}-{t['best_recall_at_1'].max():.3f}, wall {t['wall_time_s'].min():.0f}-"
              f"{t['wall_time_s'].max():.0f} s")


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/study21_runs")
    for prefix in LOSSES:
        loss_tables(root, prefix)


if __name__ == "__main__":
    main()
