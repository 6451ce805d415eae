"""Data for a run: timm transforms, the M-per-class training loader, and batched embedding of datasets.

Training batches hold ``batch_size / samples_per_class`` classes with ``samples_per_class`` samples each
(PML ``MPerClassSampler``; it draws from NumPy's global RNG, seeded and checkpointed by the trainer). An
epoch has ``floor(n_train / batch_size)`` batches (the sampler's length is the training set size rounded
down to whole batches), so an epoch sees about as many images as the training set holds.
"""
from __future__ import annotations

from typing import Optional

import torch
from pytorch_metric_learning.samplers import MPerClassSampler
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

from xbm.config import TrainConfig
from xbm.training.runtime import Runtime
from xbm.training.rng import seed_worker

RAND_AUGMENT = "rand-m9-mstd0.5"
RANDOM_ERASING = 0.2
HFLIP = 0.5
EVAL_BATCH = 256


def image_transforms(image_size: int):
    """timm's train transform (RandomResizedCrop, flip 0.5, RandAugment m9 mstd0.5, random erasing 0.2)
    and eval transform (resize to image_size / crop_pct, centre crop), both with ImageNet normalisation."""
    from timm.data import create_transform

    train = create_transform(image_size, is_training=True, auto_augment=RAND_AUGMENT,
                             re_prob=RANDOM_ERASING, hflip=HFLIP)
    return train, create_transform(image_size, is_training=False)


def make_sampler(labels: torch.Tensor, cfg: TrainConfig) -> MPerClassSampler:
    n_classes = int(torch.unique(labels).numel())
    if cfg.samples_per_class * n_classes < cfg.batch_size:
        raise ValueError(f"batch_size must be <= samples_per_class x training classes "
                         f"= {cfg.samples_per_class} x {n_classes}, but got batch_size={cfg.batch_size}; "
                         "lower batch_size or samples_per_class")
    length = max(len(labels), cfg.batch_size)
    return MPerClassSampler(labels, cfg.samples_per_class, batch_size=cfg.batch_size,
                            length_before_new_iter=length)


def train_loader(dataset: Dataset, labels: torch.Tensor, cfg: TrainConfig, pin_memory: bool) -> DataLoader:
    return DataLoader(dataset, batch_size=cfg.batch_size, sampler=make_sampler(labels, cfg), drop_last=True,
                      num_workers=cfg.num_workers, pin_memory=pin_memory, worker_init_fn=seed_worker,
                      persistent_workers=False)


class Embedder:
    """Embeds datasets in eval mode, batch by batch, under the run's autocast; returns fp32 on the device."""

    def __init__(self, runtime: Runtime, num_workers: int, batch_size: int = EVAL_BATCH) -> None:
        self.runtime = runtime
        self.num_workers = num_workers
        self.batch_size = batch_size

    @torch.no_grad()
    def __call__(self, model: nn.Module, dataset: Dataset,
                 indices: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Embeddings [N, d] (fp32) and labels [N] of ``dataset`` (or of its ``indices`` subset)."""
        if indices is not None:
            dataset = Subset(dataset, indices.tolist())
        # An own generator: a DataLoader draws its base seed from the generator it is given, so evaluation
        # never moves the global torch RNG and evaluating more (evaluate_test) leaves training unchanged.
        loader = DataLoader(dataset, batch_size=self.batch_size, shuffle=False, num_workers=self.num_workers,
                            pin_memory=self.runtime.device.type == "cuda",
                            generator=torch.Generator().manual_seed(0))
        was_training = model.training
        model.eval()
        out, labels = [], []
        try:
            for x, y, _ in loader:
                with self.runtime.autocast():
                    out.append(model(self.runtime.to_device(x)).float())
                labels.append(y)
        finally:
            model.train(was_training)
        return torch.cat(out), torch.cat(labels).to(self.runtime.device)
