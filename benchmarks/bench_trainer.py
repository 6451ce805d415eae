"""Trainer throughput against a bare hand-written PML loop, side by side in one process.

Both train the same model (``create_embedding_model``) on the same data set object (same transforms),
with the same PML ``MPerClassSampler`` batches, SupCon + PairMarginMiner and AdamW. The trainer runs its
full training step (``Trainer.train_epoch``: autocast context, finiteness check (one read per step), grad
clipping, GradScaler, pair statistics) with ``memory.enabled=false`` so the loss is the same in-batch loss;
a third column shows the trainer with the cross-batch memory (XBM, ratio 0.5) for information. Each round
runs one epoch of every loop, in a rotating order; the medians are compared (target: trainer >= 0.9x bare).

Two clocks: wall time, and the process's CPU time (``time.process_time``). On a shared machine other
processes steal wall time unevenly between the loops; CPU time of this single-threaded process (run it with
OMP_NUM_THREADS=1, data loading in the main process) counts only the work each loop does, so the CPU ratio
is the one to trust there.

    OMP_NUM_THREADS=1 python benchmarks/bench_trainer.py           # digits, timm test_resnet at 32 px
    OMP_NUM_THREADS=1 python benchmarks/bench_trainer.py --quick   # toy, mlp (seconds)

Real-image learning against a bare loop (Recall@1 per epoch, Omniglot) is ``benchmarks/bench_omniglot.py``.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from pytorch_metric_learning import losses, miners

from xbm.config import TrainConfig
from xbm.data import build_dataset
from xbm.models import create_embedding_model, model_kwargs
from xbm.trainer import Trainer
from xbm.training.loaders import make_sampler, train_loader


def timed(fn) -> tuple[int, float, float]:
    """(images, wall seconds, CPU seconds) of ``fn()``, which returns the number of images it trained on."""
    wall, cpu = time.perf_counter(), time.process_time()
    images = fn()
    return images, time.perf_counter() - wall, time.process_time() - cpu


def bare_epoch(model, loader, loss_fn, miner, optimizer, prepare) -> int:
    """The loop a PML user writes by hand (``prepare``: the data set's uint8 -> normalised batch step)."""
    model.train()
    images = 0
    for x, y, _ in loader:
        embeddings = model(prepare(x))
        loss = loss_fn(embeddings, y, miner(embeddings, y))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        images += len(y)
    return images


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="toy + mlp, a few seconds")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of one epoch per loop (default 3)")
    args = parser.parse_args()
    if args.quick:
        base = {"dataset": "toy", "model": "mlp", "embedding_size": 64, "batch_size": 64}
    else:
        base = {"dataset": "digits", "model": "test_resnet", "image_size": 32, "embedding_size": 128,
                "batch_size": 20}  # digits trains on 5 classes: 5 x 4 per batch
    base.update(warmup_epochs=0, epochs=args.rounds, lr=1e-4, device="cpu", amp="off", seed=0)
    plain_cfg = TrainConfig.from_dict({**base, "memory.enabled": False})
    splits = build_dataset(plain_cfg)
    plain = Trainer(plain_cfg, splits=splits)  # sets the timm transforms on splits, shared by every loop
    xbm = Trainer(TrainConfig.from_dict({**base, "memory.ratio": 0.5}), splits=splits)

    torch.manual_seed(0)
    model = create_embedding_model(**model_kwargs(plain_cfg), input_shape=tuple(splits.input_shape))
    optimizer = torch.optim.AdamW(model.parameters(), lr=plain_cfg.lr, weight_decay=plain_cfg.weight_decay)
    loss_fn = losses.SupConLoss(temperature=plain_cfg.loss.temperature)
    miner = miners.PairMarginMiner(pos_margin=plain_cfg.miner.pos_margin, neg_margin=plain_cfg.miner.neg_margin)
    loader = train_loader(splits.train, make_sampler(splits.train.labels, plain_cfg), plain_cfg, pin_memory=False)

    loops = {
        "bare": lambda r: bare_epoch(model, loader, loss_fn, miner, optimizer, splits.batch_transform("train")),
        "trainer": lambda r: plain.train_epoch(r + 1).images,
        "trainer+XBM": lambda r: xbm.train_epoch(r + 1).images,
    }
    print(f"data {base['dataset']} ({len(splits.train)} training samples), model {base['model']}, "
          f"batch {base['batch_size']}, {torch.get_num_threads()} torch thread(s), {args.rounds} rounds")
    wall = {name: [] for name in loops}
    cpu = {name: [] for name in loops}
    names = list(loops)
    for r in range(args.rounds):
        for name in names[r % 3:] + names[: r % 3]:  # rotate the order: no loop always runs first
            images, wall_s, cpu_s = timed(lambda: loops[name](r))
            wall[name].append(images / wall_s)
            cpu[name].append(images / cpu_s)
        print(f"round {r + 1}: " + "  ".join(f"{n} {wall[n][-1]:.0f} ({cpu[n][-1]:.0f} per CPU-s)" for n in names))
    for clock, rates in (("wall", wall), ("CPU", cpu)):
        bare, ours, mem = (statistics.median(rates[n]) for n in names)
        print(f"median images/s ({clock}): bare PML loop {bare:.0f}, trainer {ours:.0f} ({ours / bare:.2f}x, "
              f"target >= 0.9x), trainer with XBM memory {mem:.0f} ({mem / bare:.2f}x)")


if __name__ == "__main__":
    main()
