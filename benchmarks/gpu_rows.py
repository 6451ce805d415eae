"""The rows of benchmarks/bench_gpu.py, each run in its own process by :func:`child` (spawned on a GPU: fresh
GPU memory, cuDNN autotuner and per-process image readers; forked from a server that imported them in the CPU
toy run: ``bench_gpu.row_context``).

- ``ceiling``, ``timm``, ``bare``: loops around the trainer's model (``create_embedding_model``), loss
  (SupCon + PairMarginMiner) and optimiser; 1 untimed epoch, then ``spec["epochs"]`` timed ones. ``ceiling``
  and ``timm`` call the loss as the trainer does (``BatchLoss``: pairs as masks, no host read), so they
  differ from the trainer only in what they measure (no loader; timm's loader); ``bare`` passes PML's
  index tuples, as a PML user writes it (7 host reads per step: 2 ``nonzero``, 5 boolean indexings);
- trainer rows: ``Trainer.fit()``, its training passes timed around ``Trainer.train_epoch``, evaluation
  read from the epoch's metrics and split into its parts (``EVAL_PARTS``: retrieval, ``nmi``'s k-means, the
  drift and staleness probes, each timed around its ``xbm.evaluate.epoch`` function), and after
  each epoch ``xbm-tune train``'s checkpoint (``CheckpointWriter.save``): the wait timed is the state gathered
  and what that queued on the training stream run to its end (since 2026-11-28 one gathering copy per dtype;
  before, a copy per tensor to pinned buffers); the transfer to the host (on a side stream) and the write run
  beside the next epoch (it was a ``torch.save``, 0.37-0.50 s, before 2026-11-27);
- ``shared``: one of K trainer processes sharing a GPU, training passes only, timed after a barrier.

Every row reports its phases as they happen (``gpu_phases.Phases``: data, cache, model, references,
warm-up, each epoch's start, first batch and end) and its ``first_batch_s``, the seconds from its start to
its first timed batch. A row still running ``spec["stack_at"]`` seconds after its start (5 s before
``--row-timeout`` cuts it) writes every thread's stack to its stderr (``faulthandler``): where it hung.
"""
from __future__ import annotations

import faulthandler
import multiprocessing
import os
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from gpu_monitor import UtilisationSampler
from gpu_phases import Phases

TRAINER_ROWS = {  # row -> config changes; image_cache is set for every row but "live"
    "trainer cache": {"memory.enabled": False},
    "trainer XBN": {"memory.enabled": True, "memory.ratio": 0.5, "normaliser.kind": "xbn"},
    "trainer PC-XBN": {"memory.enabled": True, "memory.ratio": 0.5, "normaliser.kind": "pcxbn"},
    "trainer live": {"memory.enabled": False, "image_cache": ""},
    # each epoch's loader started when the epoch starts, as before prefetch_next_epoch: what drawing ahead gains
    "trainer cold start": {"memory.enabled": False, "prefetch_next_epoch": False},
    # every shipped search space selects on a validation split of the training classes (val_fraction 0.2):
    # a sweep trial's evaluation embeds that split, a quarter of the pass's images, where the rows above
    # (val_fraction 0, xbm-tune train's default) embed the test split, as many images as the pass trains on
    "trainer val split": {"memory.enabled": False, "val_fraction": 0.2},
}
# The order they run in: the rows the targets compare first, so that a run cut by its cap keeps them. A row takes
# 20-41 s on an H100 (most of it its start: CUDA, the image cache, references, 15 workers), and
# scripts/gpu_check.sh's 200-s cap ends after PC-XBN.
ROWS = ("ceiling", "timm", "trainer cache", "trainer XBN", "trainer PC-XBN", "trainer cold start", "trainer live",
        "bare", "trainer val split")


def criterion(cfg, kind: str):
    """``(embeddings, labels) -> loss``: the trainer's own call of the loss for every row but ``bare``, whose
    PML call is the hand-written loop's (module docstring)."""
    from xbm.losses.criteria import BatchLoss, build_pair_miner
    from xbm.losses.kinds import build_loss

    loss_fn, miner = build_loss(cfg.loss), build_pair_miner(cfg.loss, cfg.miner)
    if kind != "bare":
        return BatchLoss(loss_fn, miner)
    return lambda z, y: loss_fn(z, y, miner(z, y) if miner is not None else None)


def model_and_optimizer(cfg, device):
    from xbm.models import create_embedding_model, model_kwargs
    from xbm.training.optim import main_optimizer, optimizer_kwargs

    model = create_embedding_model(**model_kwargs(cfg), input_shape=(3, cfg.image_size, cfg.image_size)).to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    return model, main_optimizer(model, **optimizer_kwargs(cfg))


def step(model, optimizer, loss_fn, x, y, autocast) -> None:
    """Forward under autocast, the loss in fp32 on the mined pairs, backward, AdamW."""
    with autocast():
        z = model(x)
    loss = loss_fn(z.float(), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def timed_epochs(run_epoch, epochs: int, device, phases: Phases) -> list[tuple[float, float, int]]:
    """(start, end, images) of ``epochs`` timed calls of ``run_epoch(label, timed)`` after one untimed one."""
    run_epoch("untimed epoch", False)
    windows = []
    for e in range(epochs):
        _sync(device)
        start = time.perf_counter()
        images = run_epoch(f"timed epoch {e + 1}/{epochs}", True)
        _sync(device)
        windows.append((start, time.perf_counter(), images))
        phases(f"timed epoch {e + 1}/{epochs}: {images / (windows[-1][1] - start):.0f} images/s")
    return windows


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def loop_row(kind: str, spec: dict, phases: Phases) -> dict:
    """ceiling / timm / bare: a loop around the same model, loss and optimiser as the trainer's."""
    from xbm.config import TrainConfig
    from xbm.runtime.device import Runtime

    cfg = TrainConfig.from_dict(spec["config"])
    runtime = Runtime.from_config(cfg.device, cfg.amp, True)
    device = runtime.device
    start = time.time()
    model, optimizer = model_and_optimizer(cfg, device)
    loss_fn = criterion(cfg, kind)
    phases(f"model and optimiser on {device} in {phases.since(start)}")
    model.train()
    batches = spec["batches_per_epoch"]
    if kind == "ceiling":
        size, b = cfg.image_size, cfg.batch_size
        x = runtime.to_device(torch.randn(b, 3, size, size))
        y = torch.arange(b // cfg.samples_per_class).repeat_interleave(cfg.samples_per_class).to(device)

        def epoch(label: str, timed: bool) -> int:
            for _ in phases.batches(range(batches), label, timed):
                step(model, optimizer, loss_fn, x, y, runtime.autocast)
            return batches * b
    elif kind == "timm":
        start = time.time()
        loader = timm_loader(spec, cfg, device)
        workers = getattr(getattr(loader, "loader", loader), "num_workers", "?")  # under timm's PrefetchLoader
        phases(f"timm's loader ({workers} workers) in {phases.since(start)}")

        def epoch(label: str, timed: bool) -> int:
            images = 0
            for x, y in phases.batches(loader, label, timed):
                x = x.contiguous(memory_format=torch.channels_last) if device.type == "cuda" else x
                step(model, optimizer, loss_fn, x, y.to(device, non_blocking=True), runtime.autocast)
                images += len(y)
            return images
    else:
        start = time.time()
        loader, prepare = project_loader(cfg, spec["cpus"], device)
        phases(f"data, image cache and loader ({loader.num_workers} workers) in {phases.since(start)}")

        def epoch(label: str, timed: bool) -> int:
            images = 0
            for x, y, _ in phases.batches(loader, label, timed):
                x = prepare(runtime.to_device(x))
                step(model, optimizer, loss_fn, x, y.to(device, non_blocking=True), runtime.autocast)
                images += len(y)
            return images
    with UtilisationSampler() as sampler:
        windows = timed_epochs(epoch, spec["epochs"], device, phases)
    return {"windows": windows, "util": sampler.mean([w[:2] for w in windows]),
            "first_batch_s": phases.first_timed_batch}


def timm_loader(spec: dict, cfg, device):
    """timm's own loader and prefetcher (timm train.py's path) over the training classes' folders, its workers
    started by fork, as ``python train.py`` starts them on Linux under Python 3.12.

    This row's process is spawned, and spawn would be its workers' default too. timm's ``ImageDataset`` carries
    its file list (150 KB at 2,000 files), over a pipe's 64 KiB: spawn then writes each worker's start data
    only as fast as the worker before has imported this script (torch, timm, xbm), one after another. On the
    H100 (16 cores, 15 workers) the row had no batch 60 and 90 s into its first epoch; ours, whose data sets
    pickle to 3 KB, start their 15 together and give a first batch 8-12 s after the epoch starts. timm's
    steady rate is the reference here, not how its loader starts under spawn (``create_loader`` takes no
    start method, so the process default is set)."""
    import multiprocessing

    from timm.data import ImageDataset, create_loader

    from xbm.training.loaders import resolve_workers

    multiprocessing.set_start_method("fork", force=True)
    workers = resolve_workers("auto", "image", len(spec["cpus"]))
    return create_loader(ImageDataset(spec["timm_root"]), input_size=(3, cfg.image_size, cfg.image_size),
                         batch_size=cfg.batch_size, is_training=True, use_prefetcher=True, scale=(0.16, 1.0),
                         hflip=0.5, color_jitter=0.0, interpolation="bilinear", num_workers=workers,
                         pin_memory=device.type == "cuda", device=device, persistent_workers=workers > 0)


def project_loader(cfg, cpus: list[int], device):
    """The project's M-per-class loader on the data set (image cache as configured), and its batch step."""
    from xbm.data import build_dataset
    from xbm.training.loaders import make_sampler, resolve_workers, train_loader

    splits = build_dataset(cfg)
    workers = resolve_workers("auto", "image", len(cpus))
    loader = train_loader(splits.train, make_sampler(splits.train.labels, cfg), cfg,
                          pin_memory=device.type == "cuda", workers=workers)
    prepare = splits.batch_transform("train")
    return loader, prepare.to(device) if isinstance(prepare, torch.nn.Module) else prepare


def build_trainer(spec: dict, phases: Phases):
    """The row's Trainer, its data set (and image cache) built first so that each is timed."""
    from xbm.config import TrainConfig
    from xbm.data import build_dataset
    from xbm.trainer import Trainer

    cfg = TrainConfig.from_dict(spec["config"])
    start = time.time()
    splits = build_dataset(cfg)
    phases(f"data set and {'image cache' if cfg.image_cache else 'live reader'} "
           f"({type(splits.transforms.images).__name__}) in {phases.since(start)}")
    start = time.time()
    trainer = Trainer(cfg, splits=splits, cpus=len(spec["cpus"]), progress=phases.progress)
    phases(f"trainer (model, memory, loader of {trainer.workers} workers) on {trainer.runtime.device} "
           f"in {phases.since(start)}")
    return trainer


def prepare(trainer, phases: Phases) -> None:
    """``trainer.prepare()``, the references and the warm-up reported apart."""
    start, warmup = time.time(), []
    progress = trainer.progress

    def references_then(batches, description):  # the warm-up's first call ends the references
        if not warmup:
            warmup.append(time.time())
            phases(f"references in {phases.since(start)}")
        return progress(batches, description)

    trainer.progress = references_then
    trainer.prepare()
    trainer.progress = progress
    if not warmup:
        phases(f"references in {phases.since(start)}; no warm-up (warmup_epochs=0)")
    else:
        phases(f"warm-up in {phases.since(warmup[0])}")


def trainer_row(spec: dict, phases: Phases) -> dict:
    """The trainer through ``fit()``; the wait for ``xbm-tune train``'s checkpoint timed after each epoch."""
    trainer = build_trainer(spec, phases)
    prepare(trainer, phases)
    from xbm.evaluate import epoch as evaluation
    from xbm.training.checkpoint import CheckpointWriter

    passes = record_calls(trainer, "train_epoch")  # (start, end, EpochResult) of every training pass
    # an evaluation's parts, each ending on a host read (a float, .cpu()), so their wall times hold their GPU work
    parts = {name: record_calls(evaluation, function) for name, function in EVAL_PARTS.items()}
    epochs, checkpoint, files = [], Path(spec["work"]) / f"checkpoint-{os.getpid()}.pt", CheckpointWriter()
    with UtilisationSampler() as sampler:
        for metrics in trainer.fit():
            # the checkpoint's wait in three parts: the state gathered, its copies queued, the copies run
            marks = [time.perf_counter()]
            state = trainer.state_dict()
            marks.append(time.perf_counter())
            files.save(state, checkpoint)
            marks.append(time.perf_counter())
            if torch.cuda.is_available():   # what it queued on the training stream: the next epoch runs after it
                torch.cuda.current_stream().synchronize()   # (a packed state's transfer runs beside, on a side stream)
            marks.append(time.perf_counter())
            del state
            spent = {name: sum(end - begun for begun, end, _ in calls) for name, calls in parts.items()}
            spent["retrieval"] -= spent["nmi"]   # nmi runs inside evaluate_split
            epochs.append((metrics, marks[-1] - marks[0], spent))
            for calls in parts.values():
                calls.clear()
            state_s, queued_s, copied_s = (b - a for a, b in zip(marks, marks[1:]))
            phases(f"epoch {metrics['epoch']}: {metrics['images_per_s']:.0f} images/s, training "
                   f"{metrics.get('train_s', float('nan')):.1f} s, evaluation {metrics.get('eval_s', float('nan')):.1f} s, "
                   f"checkpoint {epochs[-1][1]:.3f} s (state {state_s:.3f}, copies queued {queued_s:.3f}, run "
                   f"{copied_s:.3f}){'' if metrics['epoch'] > 1 else ' (untimed)'}")
    files.wait()
    checkpoint.unlink(missing_ok=True)
    if len(passes) != len(epochs):
        raise RuntimeError(f"fit() must train through Trainer.train_epoch once per epoch, but {len(passes)} passes "
                           f"were timed for {len(epochs)} epochs: time the training pass another way")
    rows = []
    for (start, end, result), (metrics, checkpoint_s, spent) in list(zip(passes, epochs))[1:]:
        train_s = metrics.get("train_s", end - start)
        eval_s = metrics.get("eval_s", metrics["epoch_time_s"] - (end - start))
        rows.append({"window": (start, end, result.images), "train_s": train_s, "eval_s": eval_s, "parts": spent,
                     "checkpoint_s": checkpoint_s, "data_wait_s": metrics.get("data_wait_s")})
    windows = [r["window"] for r in rows]
    trained = sum(r["train_s"] for r in rows)
    eval_parts = {name: sum(r["parts"][name] for r in rows) / trained for name in EVAL_PARTS}
    eval_parts["rest"] = sum(r["eval_s"] for r in rows) / trained - sum(eval_parts.values())
    return {"windows": windows, "util": sampler.mean([w[:2] for w in windows]),
            "eval": sum(r["eval_s"] for r in rows) / trained, "nmi": eval_parts["nmi"], "eval_parts": eval_parts,
            "checkpoint": sum(r["checkpoint_s"] for r in rows) / trained,
            "data_wait": (sum(r["data_wait_s"] for r in rows) / trained
                          if all(r["data_wait_s"] is not None for r in rows) else None),
            "first_batch_s": phases.first_timed_batch}


# An evaluation's parts (xbm.evaluate.epoch's functions, as Trainer._evaluate calls them) -> the row's names:
# retrieval (query and gallery embedded, k-NN metrics, distance diagnostics; nmi taken out), nmi's k-means,
# the drift probe (fixed training samples, inputs kept), the staleness probe (the memory rows of the drift
# probe's samples, made up to 64 rows with rows drawn and embedded in the main process).
EVAL_PARTS = {"retrieval": "evaluate_split", "nmi": "nmi", "drift": "drift", "staleness": "staleness"}


def record_calls(owner, name: str) -> list[tuple[float, float, Any]]:
    """Replace ``owner.name`` (an object's method, a module's function) by a wrapper that appends each call's
    ``(start, end, result)`` to the returned list."""
    calls, call = [], getattr(owner, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        result = call(*args, **kwargs)
        calls.append((start, time.perf_counter(), result))
        return result

    setattr(owner, name, timed)
    return calls


def shared_trial(spec: dict, barrier, phases: Phases) -> dict:
    """One of K trials sharing the GPU: training passes only, timed after every trial is ready."""
    trainer = build_trainer(spec, phases)
    trainer.train_epoch(1)
    start = time.time()
    barrier.wait()
    phases(f"waited {phases.since(start)} for the other trials to be ready")
    windows = []
    for epoch in range(2, 2 + spec["epochs"]):
        start = time.time()  # the wall clock: the K processes' windows are compared with each other
        result = trainer.train_epoch(epoch)
        windows.append((start, time.time(), result.images))
    return {"windows": windows, "first_batch_s": phases.first_timed_batch,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None}


def child(kind: str, spec: dict, queue, barrier=None) -> None:
    """Entry of a row's process: pin it to its cores, cap its GPU memory, run the row, send the result
    (``("result", index, result)``) after its phases (:class:`gpu_phases.Phases`)."""
    phases = Phases(queue, spec.get("index", 0), spec.get("started", time.time()))
    phases(f"process up, torch imported, {len(spec['cpus'])} cores")
    if spec.get("stack_at"):
        faulthandler.dump_traceback_later(max(1.0, spec["stack_at"] - (time.time() - phases.started)))
    try:
        os.sched_setaffinity(0, spec["cpus"])
        # the CPU toy run: one thread per process, or its loader worker and the other rows' leftovers
        # oversubscribe 2 shared cores and the figures swing tenfold
        torch.set_num_threads(len(spec["cpus"]) if spec["config"]["device"] != "cpu" else 1)
        if spec["config"]["device"] == "cpu":
            # a toy row is forked from bench_gpu's forkserver, whose start method its loader's workers would take:
            # each worker then imported torch and the trainer again (4-6 s before a row's first batch, and as
            # much CPU). Forked, as a trial's and `xbm-tune train`'s are on Linux. GPU rows keep spawn's default.
            multiprocessing.set_start_method("fork", force=True)
        if spec.get("budget") is not None:  # --quick: a toy set "over" the in-memory budget, as CUB is
            import xbm.data.cache

            xbm.data.cache.MEMORY_BUDGET = spec["budget"]
        if spec.get("memory_fraction"):  # as a sweep's trial holding that share of the GPU caps itself
            from tune.trial.resources import cap_gpu_memory

            cap_gpu_memory(spec["memory_fraction"])
        if kind == "shared":
            result = shared_trial(spec, barrier, phases)
        elif kind in TRAINER_ROWS:
            result = trainer_row(spec, phases)
        else:
            result = loop_row(kind, spec, phases)
    except torch.OutOfMemoryError as exc:
        result = {"oom": True, "error": str(exc).splitlines()[0]}
        if barrier is not None:
            barrier.abort()
    except Exception as exc:  # reported in the table; the other rows still run
        result = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        if barrier is not None:
            barrier.abort()
    faulthandler.cancel_dump_traceback_later()
    queue.put(("result", spec.get("index", 0), result))
