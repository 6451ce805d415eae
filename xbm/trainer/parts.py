"""A training run's parts, built from its config before anything trains (``TrainerParts``): the data set, the
device and loader workers, the model, optimisers and scaler, the objective, the in-batch and cross-batch losses
with the memory and its normaliser, the training loader, the evaluation embedder and the probes.

:class:`xbm.trainer.Trainer` is these parts and the run itself: its loop, evaluation and checkpoint state.
"""
from __future__ import annotations

import functools
import math
import weakref
from typing import Callable, Iterable, Optional

import torch

from xbm.config import TrainConfig
from xbm.data import DatasetSplits, SampleDataset, build_dataset, recall_ks
from xbm.data.images import configure_images
from xbm.evaluate import epoch as evaluation
from xbm.evaluate.step_drift import StepDrift
from xbm.losses.criteria import BatchLoss, memory_size
from xbm.losses.xbm_loss import XBMLoss
from xbm.models import EmbeddingModel, compile_model, create_embedding_model, model_kwargs
from xbm.normalisers import build_normaliser
from xbm.objectives import build_objective
from xbm.runtime.device import Runtime
from xbm.training.distributed import Ranks
from xbm.training.loaders import (EVAL_BATCH, EVAL_PREFETCH, TRAIN_PREFETCH, Embedder, check_shared_memory,
                                  eval_workers, resolve_workers, stop_workers, train_loader)
from xbm.training.optim import main_optimizer, main_scheduler, optimizer_kwargs, scheduler_kwargs, warmup_optimizer
from xbm.training.parallel import DataParallel, check_workers, rank_runtime
from xbm.training.rng import seed_everything
from xbm.training.sync_bn import convert_sync_batchnorm


class TrainerParts:
    """Every part of one run, built from ``cfg`` in the order the parts need each other (the arguments are
    :class:`xbm.trainer.Trainer`'s; it adds the run's progress, epochs and state). Nothing trains here: the
    only draws are the seeding and the probe's fixed-seed indices."""

    def __init__(self, cfg: TrainConfig, splits: Optional[DatasetSplits] = None, cpus: Optional[int] = None,
                 ranks: Ranks = Ranks(), eval_progress: Optional[Callable[[Iterable, str], Iterable]] = None) -> None:
        check_workers(cfg.workers, ranks)
        self.cfg = cfg
        self.ranks = ranks
        seed_everything(cfg.seed)
        if splits is None:
            self.splits = build_dataset(cfg)
        else:
            self.splits = splits
            configure_images(splits, cfg)
        images = self.splits.input_kind == "image"
        self.runtime = rank_runtime(Runtime.from_config(cfg.device, cfg.amp, images), ranks)
        self.workers = resolve_workers(cfg.num_workers, self.splits.input_kind, cpus)
        self._check_gpu_workers(images, cpus)
        self.model = self._build_model()
        self.parallel = DataParallel(ranks, self.runtime.device)
        self.optimizer = main_optimizer(self.model, **optimizer_kwargs(cfg))
        self.scheduler = main_scheduler(self.optimizer, **scheduler_kwargs(cfg))
        self.warmup_optimizer = warmup_optimizer(self.model.head)
        self.scaler = self.runtime.grad_scaler()
        train = self.splits.train
        # The labels reach only the supervised objective and the neighbours' diagnostics.
        self.objective = build_objective(cfg, self.model, train.labels).to(self.runtime.device)
        self.objective.ranks = ranks
        if images:   # before any loader: uint8 samples of input_shape through the workers' shared memory
            self._check_shared_memory()
        compile_model(self.model, cfg.compile)  # after the objective: MoCo's key encoder copies the plain model
        pair_loss = self.objective.pair_loss()
        self.warmup_loss = BatchLoss(pair_loss)
        miner = self.objective.miner()  # one miner (stateless) serves the batch loss and the memory loss
        self.batch_loss = BatchLoss(pair_loss, miner)
        self.xbm = self._build_xbm(pair_loss, miner) if cfg.memory.enabled else None
        sampler = self.objective.sampler(train.labels)
        self.loader = train_loader(self.objective.dataset(train), sampler, cfg, workers=self.workers,
                                   pin_memory=self.runtime.device.type == "cuda",
                                   seeded=self.parallel.sampler(sampler, cfg.seed, cfg.batch_size))
        device = self.runtime.device
        self.prepare_train, prepare_eval = (_on(self.splits.batch_transform(role), device) for role in ("train", "eval"))
        self.embed = Embedder(self.runtime, self.workers, prepare=prepare_eval, progress=eval_progress)
        # A trainer dropped without close() (a notebook, a test) is collected in a reference cycle, where the
        # collector would finalise its loaders' queues before their iterators, so that each worker waits out
        # torch's 5-s join timeout (10 s for 2 workers measured here, 75 s for a GPU trial's 15). This
        # finaliser holds the loaders, never the trainer, and stops their workers while the queues are whole.
        self._stop_workers = weakref.finalize(self, _stop_workers, self.loader, self.embed)
        self._build_probes()
        self.recall_ks = cfg.recall_ks(recall_ks(cfg.dataset))   # recall_at_K for each (eval_ks or the data set's)

    def _build_probes(self) -> None:
        """The training samples seen through the eval transform (drift and staleness probes), and drift at
        Δt iterations on the same probe (XBM Eq. 2, Fig. 3)."""
        train = self.splits.train
        self.train_view = SampleDataset(train.source, train.indices, train.labels.numpy(), train.transforms, "eval")
        self.probe = evaluation.probe_indices(len(train), self.cfg.seed)
        self.step_drift = StepDrift(lambda: self.embed(self.model, self.train_view, self.probe)[0])

    def _check_gpu_workers(self, images: bool, cpus: Optional[int]) -> None:
        if images and self.workers == 0 and self.runtime.device.type == "cuda" and self.cfg.num_workers == "auto":
            raise ValueError(
                f"num_workers=auto resolved to 0 loader workers on a GPU ({cpus if cpus is not None else 'all'} "
                "CPU(s) for this run): every image would be decoded and augmented in the training process while "
                "the GPU waits. Give the run more CPUs (xbm-tune sweep --cpus-per-trial auto or >= 2; the "
                "process's CPU affinity for xbm-tune train), or set num_workers=0 explicitly to accept it")

    def _build_model(self) -> EmbeddingModel:
        """The embedding model on the run's device (SyncBatchNorm where the config asks, channels-last images)."""
        cfg, device = self.cfg, self.runtime.device
        model = create_embedding_model(**model_kwargs(cfg), input_shape=tuple(self.splits.input_shape))
        if cfg.syncs_batchnorm:   # before the optimiser and MoCo's key-encoder copy (same parameters)
            model = convert_sync_batchnorm(model, device)  # type: ignore[assignment]  # the same model, its BN swapped
        model = model.to(device)
        if self.runtime.channels_last:
            model = model.to(memory_format=torch.channels_last)
        return model

    def _check_shared_memory(self) -> None:
        cfg = self.cfg
        shares = [(cfg.batch_size // cfg.workers, TRAIN_PREFETCH, self.ranks.on_this_node)]
        if eval_workers(self.workers, max(len(part) for part in self._embedded_sets())):
            shares.append((EVAL_BATCH, EVAL_PREFETCH, 1))  # rank 0 evaluates alone
        # a pass drawn ahead holds its batches while evaluation's loader runs
        check_shared_memory(math.prod(self.splits.input_shape), self.workers, shares, at_once=cfg.prefetch_next_epoch)

    def _build_xbm(self, pair_loss, miner) -> XBMLoss:
        cfg, superclass_of = self.cfg, self.splits.superclass_of
        if cfg.normaliser.kind == "scxbn" and superclass_of is None:
            raise ValueError(f"normaliser.kind=scxbn needs a data set with super-classes, but dataset "
                             f"{cfg.dataset!r} has none; use another normaliser.kind (e.g. pcxbn) or a data "
                             "set with super-classes (toy, sop, inshop, deepfashion2, cifar100, omniglot)")
        # The labels' range is checked once here (scxbn: against the map), not in every step.
        num_labels = int(self.splits.train.labels.max()) + 1 if len(self.splits.train) else None
        normaliser = build_normaliser(cfg.normaliser, superclass_of=superclass_of, num_labels=num_labels)
        size = memory_size(cfg.memory.ratio, len(self.splits.train))
        return XBMLoss(pair_loss, cfg.embedding_size, size, miner=miner, normaliser=normaliser,
                       batch_loss_weight=cfg.memory.batch_loss_weight, update=cfg.memory.update).to(self.runtime.device)

    def _embed_training_set(self) -> torch.Tensor:
        """Every training image's current embedding (eval mode and transform), in training-set order."""
        return self.embed(self.model, self.train_view)[0]

    def _embedded_sets(self) -> list:
        """The sets this run embeds whole: the selection split's parts, the test split's under
        ``evaluate_test``, and the training set (its eval view) for a label-free objective (its k-NN
        accuracy, the neighbours' pools)."""
        splits = [self._selection_split()]
        if self.cfg.evaluate_test and self.splits.val is not None:
            splits.append(self.splits.test)
        sets = [part for split in splits for part in (split.query, split.gallery) if part is not None]
        return sets + ([] if self.objective.uses_labels else [self.splits.train])

    @functools.cached_property
    def train_classes(self) -> int:
        """The number of classes in the training set (``train_on``; label-free objectives read no label)."""
        return int(self.splits.train_labels.unique().numel())

    def _selection_split(self):
        return self.splits.val if self.splits.val is not None else self.splits.test

    def close(self) -> None:
        """Stop the loader workers (training and evaluation) now; the run is done with after this. Without it they
        stop when the parts are garbage-collected (they sit in reference cycles, so that may be much later). On a
        rank of several it lets go of the process group (``DataParallel.close``)."""
        self._stop_workers()   # the finaliser's call, now and once
        self.parallel.close()


def _stop_workers(loader, embed: Embedder) -> None:
    """The workers of a trainer's training loader and of its evaluation loaders, stopped while their queues
    are whole (``xbm.training.loaders.stop_workers``)."""
    stop_workers(loader)
    embed.close()


def _on(transform, device: torch.device):
    """A batch transform with its buffers (statistics) on ``device``."""
    return transform.to(device) if isinstance(transform, torch.nn.Module) else transform
