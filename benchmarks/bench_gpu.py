"""Is a GPU trial fed? ResNet50 at 224 px through the trainer against timm's own loop, side by side (issue 18).

Writes synthetic 500x375 JPEG photos in the CUB-200-2011 layout (``cub_fixture.py``; 11,788 of them, as
CUB, which is over ``xbm.data.cache.MEMORY_BUDGET``: without ``image_cache`` every epoch decodes again),
then trains timm ``resnet50`` (``pretrained=False``: nothing is downloaded) at 224 px with bf16 autocast,
channels_last and batch 128, the same model (``create_embedding_model``), SupCon + PairMarginMiner and
the trainer's AdamW in every row. Each row runs in its own process (fresh GPU memory, cuDNN autotuner
and per-process image readers): 1 untimed epoch, then ``--epochs`` (2) timed ones.

- **ceiling**: one batch already on the GPU, the model's step alone (forward, loss, backward, AdamW);
- **timm**: ``timm.data.create_loader`` with its prefetcher on the training classes' folders (random
  resized crop 0.16-1 + flip, as our ``metric`` preset; no colour jitter) and a loop around the same loss;
  its workers start by fork, as timm's train.py on Linux (``gpu_rows.timm_loader`` says why not spawn);
- **bare**: a hand-written PML loop on the project's loader (``train_loader``, ``image_cache``);
- **trainer** rows, ``xbm.trainer.Trainer(cfg, cpus=...)`` through ``fit()``: with the image cache and
  no memory (the same loss as the loops above), decoding live, and with XBN and PC-XBN memory (ratio 0.5);
  ``trainer cold start`` is the cache row with ``prefetch_next_epoch=false`` (each epoch's loader starts
  when the epoch does); ``trainer val split`` is the cache row with ``val_fraction=0.2``, as every shipped
  search space selects: a sweep trial's evaluation embeds that validation split, where the other rows
  (``xbm-tune train``'s default, 0) embed the test split, as many images as the pass trains on.
  Per row: evaluation (the epoch's ``eval_s`` when the trainer reports it, else ``epoch_time_s`` minus
  the training pass; ``nmi/epoch``: the part of it in ``nmi``'s k-means; a table after splits it into retrieval,
  ``nmi``, the drift probe, the staleness probe and the rest) and the wait for ``xbm-tune
  train``'s checkpoint (its copy to the CPU; the write runs beside the next epoch) as fractions of the
  epoch's training pass, the trainer's ``data_wait_s`` when it reports it, and the GPU utilisation during
  the training passes.

Then K = 1, 2, 4 trainer processes sharing the GPU, started together, each pinned to its 1/K of the cores
(``cpus`` = that share) and capped as a sweep's trial holding 1/K of the GPU is (``tune.trial.resources.cap_gpu_memory``:
the share less 1 GiB for what the process holds outside its allocator, and expandable segments): total
training images/s while all K train (their timed passes start together, after a barrier), and
out-of-memory per K. The targets are printed.

Each row prints its phases as they happen (``gpu_phases.py``: process start, data and image cache, model,
references, warm-up, each epoch's start, first batch and end), each with the seconds since the row started,
and the row's ``first batch after N s`` (its start to its first timed batch). ``--row-timeout`` (240 s)
ends a row (or a K group) that has not finished by then, naming its last phase. ``--json FILE`` appends each
row's result to FILE as one JSON line as soon as the row ends. A run stopped by SIGTERM or Ctrl-C (a
``timeout`` around it) ends its rows' processes and still prints the tables of the rows that finished.
``--keep DIR`` keeps the photos, the image cache and the checkpoints in DIR, and a later run reuses the
photos (``cub_fixture.ensure_cub``: a tree is reused once complete, with the same arguments). A set smaller
than the in-memory budget (``--images``, ``--quick``) gets the budget lowered to half its decoded size, so
that it is still "over the budget" as CUB is and the cache and live rows differ.

    python benchmarks/bench_gpu.py                  # a CUDA machine (not yet run on one: estimated 5-10 min)
    python benchmarks/bench_gpu.py --rows timm,"trainer cache" --shares ""   # a part of it
    python benchmarks/bench_gpu.py --images 6000 --epochs 1 --row-timeout 60 --keep /tmp/b   # scripts/gpu_check.sh
    python benchmarks/bench_gpu.py --quick          # CPU toy size: test_resnet at 32 px, batch 16 (2 minutes)

``--quick``, and any run without CUDA, is a smoke run on toy sizes with the in-memory budget lowered so the
set is still "over the budget"; its figures are CPU toy figures and say nothing about the GPU targets.
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from cub_fixture import CUB_CLASSES, CUB_IMAGES, PHOTO_SIZE, class_folder, class_ids, ensure_cub  # noqa: E402
from gpu_processes import Cut, on_sigterm, run_processes  # noqa: E402
from gpu_rows import ROWS, TRAINER_ROWS  # noqa: E402

FULL = dict(model="resnet50", image_size=224, batch_size=128, embedding_size=512, images=CUB_IMAGES,
            classes=CUB_CLASSES, photo=PHOTO_SIZE)
QUICK = dict(model="test_resnet", image_size=32, batch_size=16, embedding_size=64, images=960, classes=24,
             photo=(80, 60))
SHARES = (1, 2, 4)
ROW_TIMEOUT = 240.0  # seconds: a CUB-size trainer row on an H100 is estimated at about 60


# ---- the parent: data, processes, table ---------------------------------------------------------


def rate(result: dict) -> float | None:
    windows = result.get("windows")
    return sum(w[2] for w in windows) / sum(w[1] - w[0] for w in windows) if windows else None


def shared_rate(results: list[dict]) -> float | None:
    """Total images/s of K trials while all K train: the images of each timed pass that fall in the window
    every trial spans (a pass's images spread evenly over it), over that window. The span from the first
    start to the last end would count the tail, where fewer than K train, against the K; the sum of the
    trials' own rates would count time outside the common window. None without such a window."""
    if any(not r.get("windows") for r in results):
        return None
    start = max(min(w[0] for w in r["windows"]) for r in results)
    end = min(max(w[1] for w in r["windows"]) for r in results)
    if end <= start:
        return None
    images = sum(w[2] * max(0.0, min(w[1], end) - max(w[0], start)) / (w[1] - w[0])
                 for r in results for w in r["windows"])
    return images / (end - start)


def record(log: Path | None, result: dict) -> None:
    """One JSON line per finished row (``--json``)."""
    if log is not None:
        with open(log, "a") as out:
            out.write(json.dumps(result, default=str) + "\n")


def fmt(value, spec: str = ".0f", missing: str = "n/a") -> str:
    return missing if value is None else format(value, spec)


def status(result: dict) -> str:
    return "OOM" if result.get("oom") else "timed out" if result.get("timeout") else "failed"


def print_rows(results: dict[str, dict], cpu: bool) -> None:
    timm, ceiling = rate(results.get("timm", {})), rate(results.get("ceiling", {}))
    print(f"\n{'row':<22}{'images/s':>10}{'/ timm':>8}{'/ ceiling':>10}{'GPU util %':>11}{'eval/epoch':>11}"
          f"{'nmi/epoch':>10}{'ckpt/epoch':>11}{'data wait':>10}{'1st batch s':>12}")
    for name, result in results.items():
        if "error" in result:
            print(f"{name:<22}  {status(result)}: {result['error']}")
            continue
        r = rate(result)
        print(f"{name:<22}{r:10.0f}{fmt(timm and r / timm, '.2f'):>8}{fmt(ceiling and r / ceiling, '.2f'):>10}"
              f"{fmt(None if cpu else result.get('util'), '.0f'):>11}{fmt(result.get('eval'), '.2f', ''):>11}"
              f"{fmt(result.get('nmi'), '.2f', ''):>10}"
              f"{fmt(result.get('checkpoint'), '.3f', ''):>11}{fmt(result.get('data_wait'), '.2f', ''):>10}"
              f"{fmt(result.get('first_batch_s'), '.0f'):>12}")


def print_eval_parts(results: dict[str, dict]) -> None:
    """Each trainer row's evaluation by part (gpu_rows.EVAL_PARTS, then the rest), as fractions of its epochs'
    training passes: where the evaluation target is missed."""
    rows = {name: r["eval_parts"] for name, r in results.items() if "eval_parts" in r}
    if not rows:
        return
    names = list(next(iter(rows.values())))
    print(f"\nevaluation by part / epoch's training pass\n{'row':<22}" + "".join(f"{n:>11}" for n in names)
          + f"{'all':>9}")
    for row, parts in rows.items():
        print(f"{row:<22}" + "".join(f"{parts[n]:11.3f}" for n in names) + f"{sum(parts.values()):9.3f}")


def print_targets(results: dict[str, dict], shared: dict[int, list[dict]], cpu: bool) -> None:
    r = {name: rate(result) for name, result in results.items()}
    plain = r.get("trainer cache")

    def ratio(a, b):
        return a / b if a is not None and b else None

    def line(what: str, value, target: str, ok) -> None:
        verdict = "" if value is None else ("met" if ok(value) else "NOT met")
        print(f"  {what:<50}{fmt(value, '.2f'):>8}  target {target:<8} {verdict}")

    print("\nTargets" + (": CPU TOY FIGURES, they say nothing about the GPU targets" if cpu else ""))
    # a uint8 cache decodes nothing per epoch, so the trainer must beat timm's JPEG pipeline outright
    line("trainer (cache) / timm", ratio(plain, r.get("timm")), ">= 1.15", lambda v: v >= 1.15)
    line("trainer (cache) / ceiling", ratio(plain, r.get("ceiling")), ">= 0.90", lambda v: v >= 0.90)
    line("trainer + XBN / trainer", ratio(r.get("trainer XBN"), plain), ">= 0.95", lambda v: v >= 0.95)
    line("trainer + PC-XBN / trainer", ratio(r.get("trainer PC-XBN"), plain), ">= 0.90", lambda v: v >= 0.90)
    # the next epoch drawn during evaluation and the checkpoint must never cost training speed
    line("trainer / trainer cold start", ratio(plain, r.get("trainer cold start")), ">= 1.0", lambda v: v >= 1.0)
    for name in TRAINER_ROWS:
        if name in results and "error" not in results[name]:
            line(f"{name}: evaluation / epoch", results[name]["eval"], "<= 0.3", lambda v: v <= 0.3)
            line(f"{name}: checkpoint / epoch", results[name]["checkpoint"], "<= 0.05", lambda v: v <= 0.05)
            line(f"{name}: start to first timed batch, s", results[name].get("first_batch_s"), "<= 60",
                 lambda v: v <= 60)
    totals = {k: shared_rate(v) for k, v in shared.items()}
    if 1 in totals and 2 in totals:
        line("K=2 total / K=1 total images/s", ratio(totals[2], totals[1]), ">= 1.0", lambda v: v >= 1.0)
    if 4 in shared:
        ooms = sum(bool(x.get("oom")) for x in shared[4])
        print(f"  {'K=4: trials out of memory':<50}{ooms:>8}  target 0        {'met' if ooms == 0 else 'NOT met'}")


def print_shared(shared: dict[int, list[dict]], cpu: bool) -> None:
    print(f"\n{'K trials on one GPU':<22}{'total images/s':>15}{'per trial':>11}{'OOM':>5}{'peak GiB per trial':>20}"
          f"{'1st batch s':>12}")
    for k, results in shared.items():
        total = shared_rate(results)
        ooms = sum(bool(r.get("oom")) for r in results)
        peaks = ", ".join(fmt(r.get("peak_gib"), ".1f") for r in results)
        first = max((r["first_batch_s"] for r in results if r.get("first_batch_s") is not None), default=None)
        print(f"{f'K={k}':<22}{fmt(total):>15}{fmt(total and total / k):>11}{ooms:>5}{peaks:>20}{fmt(first):>12}"
              f"{'' if cpu else f'  (memory cap {1 / k:.2f} of the GPU each)'}")
        for r in results:
            if "error" in r and not r.get("oom"):
                print(f"    {status(r)}: {r['error']}")


def prepare_data(work: Path, sizes: dict, cores: int) -> tuple[Path, Path]:
    """The CUB tree (reused when complete: ``ensure_cub``) and timm's view of it (its training class
    folders, linked)."""
    data = work / "data"
    start = time.perf_counter()
    base, reused = ensure_cub(data, sizes["images"], sizes["classes"], sizes["photo"], workers=cores)
    timm_root = work / "timm_train"
    if not reused:  # links into an older tree may name class folders this one lacks
        shutil.rmtree(timm_root, ignore_errors=True)
    timm_root.mkdir(exist_ok=True)
    for c in class_ids(sizes["classes"]):
        if c <= 100:  # xbm.data.cub200 trains on classes 1-100
            link = timm_root / class_folder(c)
            if not link.is_symlink():  # --keep DIR a second time: already there
                link.symlink_to(base / "images" / class_folder(c), target_is_directory=True)
    print(f"photos: {'reused' if reused else 'wrote'} {sizes['images']} {sizes['photo'][0]}x{sizes['photo'][1]} JPEGs "
          f"({sizes['classes']} classes) in {base} in {time.perf_counter() - start:.1f} s", flush=True)
    return data, timm_root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="CPU toy size (also what a machine without CUDA runs)")
    parser.add_argument("--epochs", type=int, default=None, help="timed epochs per row (default 2)")
    parser.add_argument("--images", type=int, default=None, help=f"photos to write (default {CUB_IMAGES}, as CUB)")
    parser.add_argument("--rows", default=",".join(ROWS),
                        help="comma-separated subset of: " + ", ".join(ROWS) + " (_ for a space)")
    parser.add_argument("--shares", default="1,2,4", help="K values of the GPU-sharing part ('' skips it)")
    parser.add_argument("--keep", metavar="DIR", help="write the data, cache and checkpoints in DIR and keep them")
    parser.add_argument("--json", metavar="FILE", help="append each row's result to FILE as a JSON line when it ends")
    parser.add_argument("--row-timeout", type=float, default=ROW_TIMEOUT, metavar="SECONDS",
                        help="end a row (or a K group) not finished after SECONDS, naming its last phase "
                             "(default %(default)s)")
    args = parser.parse_args()
    if args.row_timeout <= 0:
        raise SystemExit(f"--row-timeout must be > 0 seconds, but got {args.row_timeout}")
    missing = [name for name in ("timm", "pytorch_metric_learning") if importlib.util.find_spec(name) is None]
    if missing:  # say so now, not after minutes of writing photos, in every row's process
        raise SystemExit(f"bench_gpu.py needs {', '.join(missing)} (the rows build the project's model and loss); "
                         "install the project (pip install -e .) or its wheels first")
    log = Path(args.json).resolve() if args.json else None
    cuda = torch.cuda.is_available()
    if not cuda and not args.quick:
        print("no CUDA device here: running the --quick CPU toy size instead", flush=True)
    cpu = args.quick or not cuda
    sizes = dict(QUICK if cpu else FULL)
    sizes["images"] = args.images or sizes["images"]
    epochs = args.epochs or 2
    if epochs < 1:
        raise SystemExit(f"--epochs must be >= 1 (timed epochs per row), but got {epochs}")
    rows = [r.strip().replace("_", " ") for r in args.rows.split(",") if r.strip()]  # trainer_XBN: a shell word
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        raise SystemExit(f"--rows must name rows among {list(ROWS)}, but got {unknown}")
    shares = [int(k) for k in args.shares.split(",") if k.strip()]
    cores = sorted(os.sched_getaffinity(0))
    work = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="bench_gpu_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        data, timm_root = prepare_data(work, sizes, len(cores))
        from xbm.config import TrainConfig
        from xbm.data import build_dataset
        from xbm.data.cache import MEMORY_BUDGET, estimated_bytes

        config = {"dataset": "cub200", "data_root": str(data), "model": sizes["model"], "pretrained": False,
                  "image_size": sizes["image_size"], "batch_size": sizes["batch_size"],
                  "embedding_size": sizes["embedding_size"], "warmup_epochs": 0, "epochs": 1 + epochs, "seed": 0,
                  "device": "cuda" if cuda and not cpu else "cpu", "amp": "off" if cpu else "bf16",
                  "image_cache": str(work / "cache")}
        splits = build_dataset(TrainConfig.from_dict(config), images=False)
        load = int(sizes["image_size"] / 0.875)
        decoded = estimated_bytes(splits.train.source, splits.style, load)
        budget = decoded // 2 if decoded <= MEMORY_BUDGET else None  # a smaller set stays "over the budget"
        lowered = " (lowered: the set is smaller than CUB)" if budget else ""
        print(f"{len(splits.train)} training images ({splits.train.labels.unique().numel()} classes), decoded at load "
              f"size {load}: about {decoded / 2**30:.2f} GiB against an in-memory budget of "
              f"{(budget or MEMORY_BUDGET) / 2**30:.2f} GiB{lowered}", flush=True)
        common = {"cpus": cores, "epochs": epochs, "work": str(work), "budget": budget, "timm_root": str(timm_root),
                  "batches_per_epoch": len(splits.train) // sizes["batch_size"],
                  "stack_at": max(1.0, args.row_timeout - 5)}  # where a row about to be cut is stuck
        context = row_context(cpu)
        print(f"{sizes['model']} at {sizes['image_size']} px, batch {sizes['batch_size']}, "
              f"{'fp32 on the CPU' if cpu else 'bf16, channels_last on ' + torch.cuda.get_device_name()}, "
              f"{len(cores)} cores, 1 untimed + {epochs} timed epoch(s) per row", flush=True)
        results: dict[str, dict] = {}
        shared: dict[int, list[dict]] = {}
        cut = run_all(context, rows, shares, config, common, cores, cpu, args.row_timeout, log, results, shared)
        if cut:
            print(f"\nCUT ({cut}): the tables below hold only the rows that finished; not run: "
                  f"{', '.join([r for r in rows if r not in results] + [f'K={k}' for k in shares if k not in shared])}",
                  flush=True)
        if cpu:
            print("\nCPU TOY FIGURES (--quick or no CUDA): a smoke run of the benchmark; they say nothing about the "
                  "GPU targets")
        print_rows(results, cpu)
        print_eval_parts(results)
        print_shared(shared, cpu)
        print_targets(results, shared, cpu)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    gc.collect()
    if cut:
        sys.exit(1)


def row_context(cpu: bool):
    """How the rows' processes start. On a GPU, spawned: a fresh process, as a sweep's trial is, so a row's
    ``first batch after`` counts what a user waits, imports included. The CPU toy run forks them from a server
    that imported torch, timm and the trainer once (still a fresh copy per row: a row's module settings never
    reach the next). Spawned, each toy row spent 13-24 s starting on a busy 2-core machine, 11 times per run,
    and the part was cut at its cap (2026-11-28)."""
    if not cpu:
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["gpu_rows", "timm", "xbm.trainer", "xbm.evaluate", "xbm.training.checkpoint"])
    return context


def run_all(context, rows, shares, config, common, cores, cpu, row_timeout, log, results, shared) -> str | None:
    """Run the rows, then the K groups, filling ``results`` and ``shared`` as each ends. Returns what cut the
    run short (``SIGTERM``, ``SIGINT``), or None: the caller prints the tables of what finished either way."""
    previous = on_sigterm()
    try:
        for name in rows:
            start = time.perf_counter()
            print(f"  {name}:", flush=True)
            spec = {**common, "config": {**config, **TRAINER_ROWS.get(name, {"memory.enabled": False})}}
            results[name] = run_processes(context, [(name, spec)], timeout=row_timeout)[0]
            record(log, {"row": name, **results[name]})
            first = results[name].get("first_batch_s")
            print(f"  {name}: {fmt(rate(results[name]))} images/s ({results[name].get('error', 'ok')}, "
                  f"{time.perf_counter() - start:.0f} s, first batch after {fmt(first, '.1f')} s)", flush=True)
        for k in shares:
            start = time.perf_counter()
            print(f"  K={k}:", flush=True)
            share = max(1, len(cores) // k)
            jobs = [("shared", {**common, "config": {**config, "memory.enabled": False},
                                "cpus": cores[(i * share) % len(cores):][:share] or cores[:share],
                                "memory_fraction": 1.0 / k if not cpu else None}) for i in range(k)]
            trials = run_processes(context, jobs, barrier=context.Barrier(k), timeout=row_timeout,
                                   names=[f"K={k} #{i}" for i in range(k)])
            shared[k] = trials
            record(log, {"shared": k, "trials": trials})
            firsts = [t["first_batch_s"] for t in trials if t.get("first_batch_s") is not None]
            print(f"  K={k}: {fmt(shared_rate(trials))} images/s in total ({time.perf_counter() - start:.0f} s, "
                  f"first batch after {fmt(max(firsts) if firsts else None, '.1f')} s)", flush=True)
    except (Cut, KeyboardInterrupt) as exc:
        return str(exc) or "SIGINT"
    finally:
        on_sigterm(previous)
    return None


if __name__ == "__main__":
    main()
