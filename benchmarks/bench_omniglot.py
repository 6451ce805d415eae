"""Does the trainer learn real images as well as the loop a researcher writes by hand? Side by side, one run.

Omniglot small (``../shared/datasets/omniglot_small``), resnet18 from scratch at 32 px, embedding 128,
batches of 16 characters x 4 drawings, test characters by leave-one-out Recall@1, same split and seed:

- **bare**: what a PML user writes: decode every drawing once (grey, strokes = 1 on 0, 32 px), a random
  +-2 px shift per sample (pad 2 + random crop), PML ``MPerClassSampler``, ``SupConLoss`` +
  ``PairMarginMiner``, Adam 1e-3, and for memory PML's ``CrossBatchMemory`` around the same loss and miner;
- **trainer**: ``xbm.Trainer`` with its defaults for the data set (``augment=auto``, ``normalize=auto``,
  ``num_workers=auto``), AdamW 1e-3, no warm-up, no lr decay; memory via ``XBMLoss`` (``normaliser.kind=none``).

Both with no memory and with XBM (memory ratio 1.0). Printed: Recall@1 per epoch of each run, beside the
two references (nearest neighbour on raw pixels, the untrained model), and the wall images/s of training.
Targets (issue 8): trainer final Recall@1 >= bare - 0.01 for both, trainer images/s >= 1.0x bare.

    python benchmarks/bench_omniglot.py                 # 20 epochs x 4 runs (about 25 min on 2 cores)
    python benchmarks/bench_omniglot.py --epochs 3      # a quick look
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import ImageOps
from pytorch_metric_learning import losses, miners
from pytorch_metric_learning.samplers import MPerClassSampler

from xbm.config import TrainConfig
from xbm.data import build_dataset
from xbm.evaluate import retrieval_metrics
from xbm.models import create_embedding_model, model_kwargs
from xbm.trainer import Trainer
from xbm.training.rng import seed_everything

OMNIGLOT = (Path(__file__).resolve().parents[1] / ".." / "shared" / "datasets" / "omniglot_small").resolve()
SHIFT = 2


def base_config(epochs: int, seed: int) -> dict:
    return {"dataset": "omniglot", "data_root": str(OMNIGLOT), "model": "resnet18", "image_size": 32,
            "embedding_size": 128, "batch_size": 64, "samples_per_class": 4, "lr": 1e-3, "epochs": epochs,
            "warmup_epochs": 0, "lr_step": 1000, "memory.ratio": 1.0, "device": "cpu", "seed": seed}


def decode_by_hand(dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """Every drawing of a split as strokes = 1 on 0 at 32 px, the way a researcher would."""
    images = []
    for j in dataset.indices:
        image = ImageOps.invert(dataset.source.load(int(j)).convert("L")).resize((32, 32))
        images.append(torch.from_numpy(np.asarray(image, dtype=np.float32) / 255.0))
    return torch.stack(images)[:, None], dataset.labels.clone()


def shift(x: torch.Tensor) -> torch.Tensor:
    """A random +-2 px translation per sample (pad with background, crop back)."""
    padded = F.pad(x, (SHIFT,) * 4)
    out = torch.empty_like(x)
    offsets = torch.randint(0, 2 * SHIFT + 1, (len(x), 2))
    for k, (dy, dx) in enumerate(offsets.tolist()):
        out[k] = padded[k, :, dy: dy + x.shape[2], dx: dx + x.shape[3]]
    return out


@torch.no_grad()
def recall_at_1(model, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    z = torch.cat([model(x[k: k + 256]) for k in range(0, len(x), 256)])
    model.train()
    return retrieval_metrics(z, y, ks=(1,))["recall_at_1"]


def bare_run(cfg: TrainConfig, train, test, memory: bool) -> tuple[list[float], float]:
    seed_everything(cfg.seed)
    x_train, y_train = train
    model = create_embedding_model(**model_kwargs(cfg), input_shape=(1, 32, 32))
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    loss = losses.SupConLoss(temperature=cfg.loss.temperature)
    miner = miners.PairMarginMiner(pos_margin=cfg.miner.pos_margin, neg_margin=cfg.miner.neg_margin)
    if memory:
        loss = losses.CrossBatchMemory(loss, cfg.embedding_size, memory_size=len(y_train), miner=miner)
    sampler = MPerClassSampler(y_train, 4, batch_size=cfg.batch_size, length_before_new_iter=len(y_train))
    curve, images, seconds = [], 0, 0.0
    for _ in range(cfg.epochs):
        order = torch.tensor(list(iter(sampler)))
        start = time.perf_counter()
        for b in range(len(order) // cfg.batch_size):
            idx = order[b * cfg.batch_size: (b + 1) * cfg.batch_size]
            z = model(shift(x_train[idx]))
            value = loss(z, y_train[idx]) if memory else loss(z, y_train[idx], miner(z, y_train[idx]))
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
            images += len(idx)
        seconds += time.perf_counter() - start
        curve.append(recall_at_1(model, *test))
    return curve, images / seconds


def trainer_run(cfg: TrainConfig, splits) -> tuple[list[float], float, dict]:
    history = list(Trainer(cfg, splits=splits).fit())
    per_epoch = cfg.batch_size * (len(splits.train) // cfg.batch_size)
    seconds = sum(per_epoch / m["images_per_s"] for m in history)  # training time, evaluation excluded
    return [m["recall_at_1"] for m in history], per_epoch * len(history) / seconds, history[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not OMNIGLOT.is_dir():
        raise SystemExit(f"needs the Omniglot small zips in {OMNIGLOT}")
    start = time.perf_counter()
    splits = build_dataset(TrainConfig.from_dict(base_config(args.epochs, args.seed)))
    print(f"decoded and cached {len(splits.train)} training + {len(splits.test.query)} test drawings "
          f"in {time.perf_counter() - start:.1f} s", flush=True)
    train, test = decode_by_hand(splits.train), decode_by_hand(splits.test.query)
    results = {}
    for memory in (False, True):
        name = "XBM" if memory else "no memory"
        cfg = TrainConfig.from_dict({**base_config(args.epochs, args.seed), "memory.enabled": memory})
        curve, rate = bare_run(cfg, train, test, memory)
        results[f"bare, {name}"] = (curve, rate)
        print(f"bare, {name}: Recall@1 {' '.join(f'{v:.3f}' for v in curve)}  ({rate:.0f} images/s)", flush=True)
        curve, rate, first = trainer_run(cfg, splits)
        results[f"trainer, {name}"] = (curve, rate)
        print(f"trainer, {name}: Recall@1 {' '.join(f'{v:.3f}' for v in curve)}  ({rate:.0f} images/s)", flush=True)
    print(f"references: raw pixels {first['reference_raw_recall_at_1']:.3f}, untrained model "
          f"{first['reference_untrained_recall_at_1']:.3f}")
    for name in ("no memory", "XBM"):
        (bare, bare_rate), (ours, our_rate) = results[f"bare, {name}"], results[f"trainer, {name}"]
        verdict = "ok" if ours[-1] >= bare[-1] - 0.01 else "BELOW"
        print(f"{name}: final Recall@1 trainer {ours[-1]:.3f} vs bare {bare[-1]:.3f} ({ours[-1] - bare[-1]:+.3f}, "
              f"target >= -0.01: {verdict}); images/s {our_rate / bare_rate:.2f}x bare (target >= 1.0x)")


if __name__ == "__main__":
    main()
