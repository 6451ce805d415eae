"""The rows of benchmarks/bench_gpu.py, each run in its own process by :func:`child` (spawned: fresh GPU
memory, cuDNN autotuner and per-process image readers).

- ``ceiling``, ``timm``, ``bare``: loops around the trainer's model (``create_embedding_model``), loss
  (SupCon + PairMarginMiner) and optimiser; 1 untimed epoch, then ``spec["epochs"]`` timed ones. ``ceiling``
  and ``timm`` call the loss as the trainer does (``BatchLoss``: pairs as masks, no host read), so they
  differ from the trainer only in what they measure (no loader; timm's loader); ``bare`` passes PML's
  index tuples, as a PML user writes it (7 host reads per step: 2 ``nonzero``, 5 boolean indexings);
- trainer rows: ``Trainer.fit()``, its training passes timed around ``Trainer.train_epoch``, evaluation
  read from the epoch's metrics, a ``torch.save(trainer.state_dict())`` timed after each epoch;
- ``shared``: one of K trainer processes sharing a GPU, training passes only, timed after a barrier.
"""
from __future__ import annotations

import os
import time
import traceback
from pathlib import Path

import torch

from gpu_monitor import UtilisationSampler

TRAINER_ROWS = {  # row -> config changes; image_cache is set for every row but "live"
    "trainer cache": {"memory.enabled": False},
    "trainer live": {"memory.enabled": False, "image_cache": ""},
    "trainer XBN": {"memory.enabled": True, "memory.ratio": 0.5, "normaliser.kind": "xbn"},
    "trainer PC-XBN": {"memory.enabled": True, "memory.ratio": 0.5, "normaliser.kind": "pcxbn"},
}
ROWS = ("ceiling", "timm", "bare", *TRAINER_ROWS)


def criterion(cfg, kind: str):
    """``(embeddings, labels) -> loss``: the trainer's own call of the loss for every row but ``bare``, whose
    PML call is the hand-written loop's (module docstring)."""
    from xbm.training.criteria import BatchLoss, build_pair_miner
    from xbm.training.loss_kinds import build_loss

    loss_fn, miner = build_loss(cfg.loss), build_pair_miner(cfg.loss, cfg.miner)
    if kind != "bare":
        return BatchLoss(loss_fn, miner)
    return lambda z, y: loss_fn(z, y, miner(z, y) if miner is not None else None)


def model_and_optimizer(cfg, device):
    from xbm.models import create_embedding_model
    from xbm.training.optim import main_optimizer

    model = create_embedding_model(cfg, (3, cfg.image_size, cfg.image_size)).to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    return model, main_optimizer(model, cfg)


def step(model, optimizer, loss_fn, x, y, autocast) -> None:
    """Forward under autocast, the loss in fp32 on the mined pairs, backward, AdamW."""
    with autocast():
        z = model(x)
    loss = loss_fn(z.float(), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def timed_epochs(run_epoch, epochs: int, device) -> list[tuple[float, float, int]]:
    """(start, end, images) of ``epochs`` timed calls of ``run_epoch()`` after one untimed one."""
    run_epoch()
    windows = []
    for _ in range(epochs):
        _sync(device)
        start = time.perf_counter()
        images = run_epoch()
        _sync(device)
        windows.append((start, time.perf_counter(), images))
    return windows


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def loop_row(kind: str, spec: dict) -> dict:
    """ceiling / timm / bare: a loop around the same model, loss and optimiser as the trainer's."""
    from xbm.config import TrainConfig
    from xbm.training.runtime import Runtime

    cfg = TrainConfig.from_dict(spec["config"])
    runtime = Runtime.from_config(cfg.device, cfg.amp, True)
    device = runtime.device
    model, optimizer = model_and_optimizer(cfg, device)
    loss_fn = criterion(cfg, kind)
    model.train()
    batches = spec["batches_per_epoch"]
    if kind == "ceiling":
        size, b = cfg.image_size, cfg.batch_size
        x = runtime.to_device(torch.randn(b, 3, size, size))
        y = torch.arange(b // cfg.samples_per_class).repeat_interleave(cfg.samples_per_class).to(device)

        def epoch() -> int:
            for _ in range(batches):
                step(model, optimizer, loss_fn, x, y, runtime.autocast)
            return batches * b
    elif kind == "timm":
        loader = timm_loader(spec, cfg, device)

        def epoch() -> int:
            images = 0
            for x, y in loader:
                x = x.contiguous(memory_format=torch.channels_last) if device.type == "cuda" else x
                step(model, optimizer, loss_fn, x, y.to(device, non_blocking=True), runtime.autocast)
                images += len(y)
            return images
    else:
        loader, prepare = project_loader(cfg, spec["cpus"], device)

        def epoch() -> int:
            images = 0
            for x, y, _ in loader:
                x = prepare(runtime.to_device(x))
                step(model, optimizer, loss_fn, x, y.to(device, non_blocking=True), runtime.autocast)
                images += len(y)
            return images
    with UtilisationSampler() as sampler:
        windows = timed_epochs(epoch, spec["epochs"], device)
    return {"windows": windows, "util": sampler.mean([w[:2] for w in windows])}


def timm_loader(spec: dict, cfg, device):
    """timm's own loader and prefetcher (timm train.py's path) over the training classes' folders."""
    from timm.data import ImageDataset, create_loader

    from xbm.training.loaders import resolve_workers

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


def trainer_row(spec: dict) -> dict:
    """The trainer through ``fit()``; a ``torch.save(state_dict())`` timed after each epoch."""
    from xbm.config import TrainConfig
    from xbm.trainer import Trainer

    trainer = Trainer(TrainConfig.from_dict(spec["config"]), cpus=len(spec["cpus"]))
    passes = []  # (start, end, EpochResult) of every training pass, timed around the trainer's own method
    train_epoch = trainer.train_epoch

    def timed(epoch, *args, **kwargs):
        start = time.perf_counter()
        result = train_epoch(epoch, *args, **kwargs)
        passes.append((start, time.perf_counter(), result))
        return result

    trainer.train_epoch = timed
    epochs, checkpoint = [], Path(spec["work"]) / f"checkpoint-{os.getpid()}.pt"
    with UtilisationSampler() as sampler:
        for metrics in trainer.fit():
            start = time.perf_counter()
            torch.save(trainer.state_dict(), checkpoint)
            epochs.append((metrics, time.perf_counter() - start))
    checkpoint.unlink(missing_ok=True)
    if len(passes) != len(epochs):
        raise RuntimeError(f"fit() must train through Trainer.train_epoch once per epoch, but {len(passes)} passes "
                           f"were timed for {len(epochs)} epochs: time the training pass another way")
    rows = []
    for (start, end, result), (metrics, checkpoint_s) in list(zip(passes, epochs))[1:]:
        train_s = metrics.get("train_s", end - start)
        eval_s = metrics.get("eval_s", metrics["epoch_time_s"] - (end - start))
        rows.append({"window": (start, end, result.images), "train_s": train_s, "eval_s": eval_s,
                     "checkpoint_s": checkpoint_s, "data_wait_s": metrics.get("data_wait_s")})
    windows = [r["window"] for r in rows]
    return {"windows": windows, "util": sampler.mean([w[:2] for w in windows]),
            "eval": sum(r["eval_s"] for r in rows) / sum(r["train_s"] for r in rows),
            "checkpoint": sum(r["checkpoint_s"] for r in rows) / sum(r["train_s"] for r in rows),
            "data_wait": (sum(r["data_wait_s"] for r in rows) / sum(r["train_s"] for r in rows)
                          if all(r["data_wait_s"] is not None for r in rows) else None)}


def shared_trial(spec: dict, barrier) -> dict:
    """One of K trials sharing the GPU: training passes only, timed after every trial is ready."""
    from xbm.config import TrainConfig
    from xbm.trainer import Trainer

    trainer = Trainer(TrainConfig.from_dict(spec["config"]), cpus=len(spec["cpus"]))
    trainer.train_epoch(1)
    barrier.wait()
    windows = []
    for epoch in range(2, 2 + spec["epochs"]):
        start = time.time()  # the wall clock: the K processes' windows are compared with each other
        result = trainer.train_epoch(epoch)
        windows.append((start, time.time(), result.images))
    return {"windows": windows, "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None}


def child(kind: str, spec: dict, queue, barrier=None) -> None:
    """Entry of a row's process: pin it to its cores, cap its GPU memory, run the row, send the result."""
    try:
        os.sched_setaffinity(0, spec["cpus"])
        # the CPU toy run: one thread per process, or its loader worker and the other rows' leftovers
        # oversubscribe 2 shared cores and the figures swing tenfold
        torch.set_num_threads(len(spec["cpus"]) if spec["config"]["device"] != "cpu" else 1)
        if spec.get("budget") is not None:  # --quick: a toy set "over" the in-memory budget, as CUB is
            import xbm.data.cache

            xbm.data.cache.MEMORY_BUDGET = spec["budget"]
        if spec.get("memory_fraction"):  # as a sweep's trial holding that share of the GPU caps itself
            from tune.resources import cap_gpu_memory

            cap_gpu_memory(spec["memory_fraction"])
        if kind == "shared":
            result = shared_trial(spec, barrier)
        elif kind in TRAINER_ROWS:
            result = trainer_row(spec)
        else:
            result = loop_row(kind, spec)
    except torch.OutOfMemoryError as exc:
        result = {"oom": True, "error": str(exc).splitlines()[0]}
        if barrier is not None:
            barrier.abort()
    except Exception as exc:  # reported in the table; the other rows still run
        result = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        if barrier is not None:
            barrier.abort()
    queue.put((kind, spec.get("index", 0), result))
