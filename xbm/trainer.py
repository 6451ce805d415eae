"""One training run of the protocol (thesis seed 000 §5.2, AXBN paper seed 001 §5.1), no Ray:

    trainer = Trainer(TrainConfig.from_dict({"dataset": "toy", "model": "mlp", "epochs": 5}))
    for metrics in trainer.fit():          # one flat dict per main epoch, epoch = 1, 2, ...
        state = trainer.state_dict()       # everything needed to continue exactly

1. ``warmup_epochs`` of head-only training (backbone frozen, in eval mode) with SGD lr 1e-3 and the
   objective's in-batch loss (SupCon for ``supervised``; no miner, no memory);
2. ``epochs`` main epochs: AdamW + StepLR, AMP and clipping, the objective's pair loss (SupCon with the
   PairMarginMiner for ``supervised``; :mod:`xbm.objectives` for the label-free ones) in the batch
   before ``memory.start_epoch`` (0-based) and against the cross-batch memory (``XBMLoss``, with the
   configured normaliser) from then on; ``memory.enabled=False`` never uses the memory;
3. after each main epoch: retrieval metrics on the selection split (val when ``val_fraction > 0``, else
   test), test metrics as ``test_*`` when ``evaluate_test``, and the diagnostics (xbm.evaluate.epoch); the
   one-shot error of the validation episodes as ``val_oneshot_error`` and of the test split's as
   ``oneshot_error`` (:mod:`xbm.data.episodes`), with the held-out super-classes (``val_superclasses``);
   the pair counts of the epoch, among them ``loss_pos_pairs`` (0: the epoch collapsed, see ``collapsed``);
   and, on every row, the two references measured once before training (untrained model, raw inputs).

Resuming: ``Trainer(cfg).load_state_dict(state)`` then ``fit()`` continues after the saved epoch with the
same model, optimisers, scheduler, scaler, memory (buffers, pointer, fill), normaliser state, objective
state (MoCo's key encoder, the neighbours' candidate pools), sampler order and pass count (augmentation seeds), Python/NumPy/torch RNG states, drift probe and references, so
its metrics equal an uninterrupted run's on CPU, whatever the number of loader workers.
"""
from __future__ import annotations

import functools
import math
import time
import weakref
from typing import Any, Callable, Iterable, Iterator, Optional

import torch

from xbm.config import MUTABLE_KEYS, TrainConfig
from xbm.data import DatasetSplits, SampleDataset, build_dataset, recall_ks
from xbm.data.images import configure_images
from xbm.evaluate import epoch as evaluation
from xbm.evaluate.step_drift import StepDrift
from xbm.losses.criteria import BatchLoss, memory_size
from xbm.losses.xbm_loss import XBMLoss
from xbm.models import EmbeddingModel, compile_model, create_embedding_model, model_kwargs
from xbm.normalisers import build_normaliser
from xbm.normalisers.axbn import AXBN
from xbm.objectives import build_objective
from xbm.runtime.device import Runtime
from xbm.training.distributed import Ranks
from xbm.training.epoch import EpochResult, Step, run_epoch
from xbm.training.loaders import (EVAL_BATCH, EVAL_PREFETCH, TRAIN_PREFETCH, DrawnPass, Embedder, check_shared_memory,
                                  eval_workers, resolve_workers, start_persistent_workers, stop_workers, train_loader)
from xbm.training.optim import (load_optimizer_state, main_optimizer, main_scheduler, optimizer_kwargs,
                                rescale_optimizer, scheduler_kwargs, warmup_optimizer)
from xbm.training.parallel import DataParallel, check_workers, on_main, rank_runtime, share_buffers, share_rng
from xbm.training.prefill import prefill
from xbm.training.reuse import Reuse
from xbm.training.rng import rng_isolated, rng_state, seed_everything, set_rng_state
from xbm.training.sync_bn import convert_sync_batchnorm

STATE_VERSION = 2
# Keys that may differ between a checkpoint and the config resuming it: the state fits either way (more
# epochs, another device, other loader workers, where the data and the image cache live). Augmentations
# are seeded per drawn sample (xbm.training.loaders.SeededSampler), so the worker count changes nothing.
RESUMABLE_CHANGES = frozenset({"epochs", "device", "num_workers", "data_root", "image_cache", "evaluate_test",
                               "eval_every", "compile", "prefetch_next_epoch"})
#: the metrics that measure the machine, not the run: they differ between two identical runs
TIMING_KEYS = ("epoch_time_s", "images_per_s", "train_s", "data_wait_s", "eval_s", "gpu_memory_peak_gib")


class Trainer:
    """A training run: its data, model, memory, normaliser and loss, built from one config; ``fit`` trains it
    and yields each epoch's metrics.

    Args:
        cfg: the run's config.
        splits: an already built data set to reuse (the same data set; its images are re-wired for ``cfg``'s
            preset); None builds it from ``cfg``.
        progress: wraps each epoch's batch iterable, e.g. ``lambda batches, desc: tqdm(batches, desc=desc)``
            (the CLI's bar: ``xbm.runtime.progress.bars``).
        cpus: the CPUs this run may use, for ``num_workers=auto`` (default: the process's affinity mask).
        evaluate_at: main epochs (1-based) evaluated whatever ``eval_every`` says, e.g. a sweep scheduler's rung
            epochs, so that it decides on measured values.
        reuse_dir: a folder where the references and the warm-up are stored and read back by later runs with
            the same inputs (:mod:`xbm.training.reuse`; None: always computed); ``reused_references`` and
            ``reused_warmup`` say whether this run read them.
        ranks: this process's place in a data-parallel run of ``cfg.workers`` ranks (docs/distributed.md): each
            trains on its share of every global batch and all keep the same memory, normalisers and state;
            rank 0 evaluates and every rank yields rank 0's metrics.
        eval_progress: wraps each evaluation pass's batches (:class:`xbm.training.loaders.Embedder`; the CLI's
            bar shows once a pass lasts a few seconds).

    Raises:
        ValueError: ``cfg.workers`` does not match ``ranks``, or the data set's root is missing or incomplete
            (the message names what is missing and where).
    """

    def __init__(self, cfg: TrainConfig, splits: Optional[DatasetSplits] = None,
                 progress: Optional[Callable[[Iterable, str], Iterable]] = None, cpus: Optional[int] = None,
                 evaluate_at: Iterable[int] = (), reuse_dir: Optional[str] = None, ranks: Ranks = Ranks(),
                 eval_progress: Optional[Callable[[Iterable, str], Iterable]] = None) -> None:
        check_workers(cfg.workers, ranks)
        self.cfg = cfg
        self.ranks = ranks
        self.evaluate_at = frozenset(int(e) for e in evaluate_at)
        self.reuse = Reuse(reuse_dir)
        self.reused_references = self.reused_warmup = False
        self.progress = progress
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
        self.passes = 0  # passes over the training data so far: the augmentation seeds' epoch
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
        self.previous_probe: Optional[torch.Tensor] = None
        self.references: Optional[dict[str, float]] = None
        self.epoch = 0
        self.warmup_done = cfg.warmup_epochs == 0
        self.ahead: Optional[DrawnPass] = None   # the next main epoch's pass, drawn early (prefetch_next_epoch)

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

    def _prefill_memory(self) -> None:
        """``memory.prefill`` (xbm.training.prefill): the current model's eval embeddings of the training set,
        labelled as the pair loss sees them (classes; a label-free objective's image ids), computed on rank 0
        and sent to every rank, so that all ranks' memories are equal bit for bit."""
        embeddings = on_main(self.ranks, lambda: self._embed_training_set().cpu())
        train = self.splits.train
        labels = train.labels if self.objective.uses_labels else torch.arange(len(train))
        prefill(self.xbm.memory, embeddings.to(self.runtime.device), labels, self.cfg.seed, self.xbm.iteration)

    # ---- training ------------------------------------------------------------------------------
    def prepare(self) -> None:
        """Measure the references and run the warm-up, each once (a resumed run has both): everything
        before the first main epoch, which ``fit`` does first anyway. Callers that time set-up call it.
        With a ``reuse_dir``, either may be read from it instead (the warm-up only with one worker: its steps
        are collective). Several ranks: rank 0 measures the references, every rank gets them."""
        if self.references is None:
            self.references, self.reused_references = on_main(self.ranks, lambda: self.reuse.references(
                self, lambda: evaluation.references(self.model, self._selection_split(), self.embed)))
        if not self.warmup_done:
            if self.ranks.distributed:
                self._warmup()
            else:
                self.reused_warmup = self.reuse.warmup(self, self._warmup)

    def fit(self) -> Iterator[dict[str, Any]]:
        """Measure the references (once), run the warm-up (once) and the remaining main epochs, yielding
        each epoch's metrics."""
        self.prepare()
        while self.epoch < self.cfg.epochs:
            yield self._main_epoch(self.epoch + 1)

    def _warmup(self) -> None:
        self.model.train()
        self.model.backbone.eval()  # frozen: no BatchNorm statistics move either
        self.model.backbone.requires_grad_(False)
        head = list(self.model.head.parameters())
        step = Step(self.model, self.objective, self.parallel.criterion(self.warmup_loss, self.objective.blocks),
                    self.warmup_optimizer, self.scaler, head, self.cfg.clip_grad, self.prepare_train,
                    sync_grads=self.parallel.grad_sync(head))
        try:
            for w in range(self.cfg.warmup_epochs):
                batches = self._batches(f"warm-up {w + 1}/{self.cfg.warmup_epochs}", epoch_index=-1)
                run_epoch(step, batches, self.runtime, epoch=0, epoch_index=0)
        finally:
            self.model.backbone.requires_grad_(True)
        self.warmup_done = True

    def _batches(self, description: str, epoch_index: int) -> Iterable:
        ahead, self.ahead = self.ahead, None
        if ahead is None:
            self._start_pass(epoch_index)
        elif ahead.epoch_index != epoch_index:
            raise RuntimeError(f"the pass of epoch index {ahead.epoch_index} was drawn ahead, but epoch index "
                               f"{epoch_index} came next: main epochs run in order, through fit()")
        batches = self.loader if ahead is None else ahead.batches
        return self.progress(batches, description) if self.progress is not None else batches

    def _start_pass(self, epoch_index: int) -> None:
        share_rng(self.ranks)   # every rank draws the same global batches
        self.objective.begin_epoch(epoch_index, self._embed_training_set, self.loader.sampler.sampler)
        self.loader.sampler.epoch = self.passes
        self.passes += 1

    def _draw_ahead(self, epoch: int) -> None:
        """After main epoch ``epoch``'s training pass: draw epoch ``epoch + 1``'s pass and start its loader,
        whose workers then prepare its first batches while this epoch is evaluated and checkpointed (a short
        epoch otherwise waits for them when it starts: a 15-batch epoch on an H100, 0.2-0.4 s of its 1 s pass).
        The draw moves the sampler and the RNG streams earlier; nothing draws in between (evaluation is
        ``rng_isolated``), so the run is the same batch for batch, and ``state_dict`` gives the state from
        before the draw, so a resumed run draws the same pass again. Not where the next epoch fills the memory
        first (prefill embeds before its pass is drawn), for an objective whose ``begin_epoch`` depends on
        the row (``draws_ahead``), without loader workers, or after the last epoch."""
        if not (self.cfg.prefetch_next_epoch and self.workers > 0 and epoch < self.cfg.epochs
                and self.objective.draws_ahead and not self._prefills(epoch + 1)):
            return
        before = self._pass_state()
        self._start_pass(epoch_index=epoch)
        self.ahead = DrawnPass(epoch, iter(self.loader), before)

    def _pass_state(self) -> dict[str, Any]:
        """What drawing a pass changes, as ``state_dict`` keeps it."""
        # MPerClassSampler shuffles its class list in place: its order is sampler state.
        return {"sampler_labels": _sampler_labels(self.loader.sampler.sampler), "passes": self.passes,
                "rng": rng_state()}

    def _prefills(self, epoch: int) -> bool:
        """Whether main epoch ``epoch`` (1-based) starts by filling the memory (``memory.prefill``)."""
        return (self.cfg.memory.prefill and self.criterion(epoch - 1) is self.xbm
                and len(self.xbm.memory) == 0)

    def criterion(self, epoch_index: int):
        """The loss of 0-based main epoch ``epoch_index``: XBMLoss from memory.start_epoch on."""
        if self.xbm is not None and epoch_index >= self.cfg.memory.start_epoch:
            return self.xbm
        return self.batch_loss

    def train_epoch(self, epoch: int) -> EpochResult:
        """The training pass of main epoch ``epoch`` (1-based) alone: no scheduler step, no evaluation."""
        if self._prefills(epoch):
            self._prefill_memory()   # before the memory's first step (a resumed run's memory is not empty)
        self.model.train()
        step = Step(self.parallel.model(self.model), self.objective,
                    self.parallel.criterion(self.criterion(epoch - 1), self.objective.blocks), self.optimizer,
                    self.scaler, list(self.model.parameters()), self.cfg.clip_grad, self.prepare_train,
                    on_step=self.step_drift.after_step,
                    on_begin=lambda: self.step_drift.begin_epoch(len(self.loader)))
        batches = self._batches(f"epoch {epoch}/{self.cfg.epochs}", epoch_index=epoch - 1)
        result = run_epoch(step, batches, self.runtime, epoch=epoch, epoch_index=epoch - 1)
        share_buffers(self.ranks, (self.model, self.objective))   # e.g. per-rank BatchNorm statistics
        return result

    def evaluates(self, epoch: int) -> bool:
        """Whether main epoch ``epoch`` (1-based) is evaluated: every ``eval_every``-th, the last, and
        those of ``evaluate_at``."""
        return epoch % self.cfg.eval_every == 0 or epoch == self.cfg.epochs or epoch in self.evaluate_at

    def _main_epoch(self, epoch: int) -> dict[str, Any]:
        start = time.perf_counter()
        lr = self.optimizer.param_groups[0]["lr"]
        peak = _peak_memory(self.runtime.device)
        result = self.train_epoch(epoch)
        self.scheduler.step()
        self._draw_ahead(epoch)
        metrics = {"epoch": epoch, "loss": result.loss, "lr": lr}
        evaluated = time.perf_counter()
        if self.evaluates(epoch):
            with rng_isolated():
                metrics.update(self._evaluate_on_main(epoch))
        metrics.update(result.pairs, memory_fill=result.memory_fill)
        metrics.update(self.step_drift.metrics())
        metrics.update(self.objective.epoch_metrics())
        metrics.update(self.references)
        self.epoch = epoch
        now = time.perf_counter()
        # train_s: the pass and what readies it outside its clock (the memory's prefill, the next pass drawn
        # ahead), so that train_s + eval_s is the epoch; images_per_s is the pass's own rate
        metrics.update(epoch_time_s=now - start, images_per_s=result.images_per_s * self.ranks.world_size,
                       train_s=evaluated - start,
                       data_wait_s=result.data_wait_s, eval_s=now - evaluated,
                       gpu_memory_peak_gib=peak())
        metrics["skipped_images"] = self.splits.skipped_images  # on_bad_image=skip (xbm.data.bad_images)
        metrics["memory_bytes"] = self.xbm.memory.nbytes if self.xbm is not None else 0  # an objective's memory
        metrics["train_classes"] = self.train_classes  # a refit trains on more classes than a sweep (train_on)
        metrics["kalman_gain"] = _kalman_gain(self.xbm)   # AXBN's gain K in use; None for other normalisers
        return metrics

    def close(self) -> None:
        """Stop the loader workers (training and evaluation) now; the trainer is done with after this. Without
        it they stop when the trainer is garbage-collected (it sits in reference cycles, so that may be much
        later). On a rank of several it lets go of the process group (``DataParallel.close``)."""
        self.ahead = None
        self._stop_workers()   # the finaliser's call, now and once
        self.parallel.close()

    # ---- evaluation ----------------------------------------------------------------------------
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

    def _evaluate_on_main(self, epoch: int) -> dict[str, Any]:
        """``_evaluate`` on rank 0 (the plain model: no collective), its row and drift probe on every rank."""
        if not self.ranks.distributed:
            return self._evaluate(epoch)

        def evaluate():
            metrics = self._evaluate(epoch)
            return metrics, None if self.previous_probe is None else self.previous_probe.cpu()

        metrics, self.previous_probe = on_main(self.ranks, evaluate)
        return metrics

    def _evaluate(self, epoch: int) -> dict[str, Any]:
        splits, superclass_of = self.splits, self.splits.superclass_of
        selection = self._selection_split()
        # train_on=all trains on the test classes too: its retrieval metrics measure fit, not generalisation
        held_out = "test" if self.cfg.train_on != "all" else "train"
        metrics: dict[str, Any] = {"eval_split": "val" if splits.val is not None else held_out}
        metrics.update(evaluation.evaluate_split(self.model, selection, self.embed, superclass_of, self.recall_ks,
                                                 with_nmi=self.cfg.eval_nmi))
        if splits.val is not None and "oneshot_error" in metrics:   # the one-shot error a sweep selects on
            metrics["val_oneshot_error"] = metrics.pop("oneshot_error")
        if splits.val_superclasses:
            metrics["val_superclasses"] = ",".join(splits.val_superclasses)
        label_free = not self.objective.uses_labels
        bank = functools.cache(lambda: self.embed(self.model, self.train_view))  # one embedding for both splits
        if label_free:
            metrics.update(evaluation.knn(self.model, selection, self.train_view, self.embed, bank))
        if self.cfg.evaluate_test and splits.val is not None:
            test = evaluation.evaluate_split(self.model, splits.test, self.embed, superclass_of, self.recall_ks, False)
            if label_free:
                test.update(evaluation.knn(self.model, splits.test, self.train_view, self.embed, bank))
            if "oneshot_error" in test:   # the one-shot error's own name on the test split
                metrics["oneshot_error"] = test.pop("oneshot_error")
            metrics.update({f"test_{name}": value for name, value in test.items()})
        drift, self.previous_probe = evaluation.drift(self.model, self.train_view, self.probe, self.embed,
                                                      self.previous_probe)
        metrics.update(drift)
        memory = self.xbm.memory if self.xbm is not None else None
        metrics.update(evaluation.staleness(self.model, self.train_view, memory, self.embed, self.cfg.seed, epoch,
                                            self.probe, probe_now=self.previous_probe))   # drift's, just now
        return metrics

    # ---- checkpoint state ----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue; tensors and plain values only (``torch.load(weights_only=True)``)."""
        return {
            "version": STATE_VERSION,
            "config": self.cfg.to_dict(),
            "epoch": self.epoch,
            "warmup_done": self.warmup_done,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "warmup_optimizer": self.warmup_optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "xbm": self.xbm.state_dict() if self.xbm is not None else None,
            **(self._pass_state() if self.ahead is None else self.ahead.state_before),
            "objective": self.objective.state_dict(),
            "references": self.references,
            "previous_probe": self.previous_probe,
            "step_drift": self.step_drift.state_dict(),
            # how evaluation fed the model (None for vectors): an export of these weights needs it
            "preprocessing": self.preprocessing_dict(),
        }

    def preprocessing_dict(self) -> Optional[dict[str, Any]]:
        """The data set's input path for evaluation (:class:`xbm.data.preprocess.Preprocessing`) as a dict."""
        prep = self.splits.preprocessing
        return None if prep is None else prep.to_dict()

    def load_state_dict(self, state: dict[str, Any], mutable: Iterable[str] = ()) -> None:
        """Restore a ``state_dict()``; its config must match this trainer's up to RESUMABLE_CHANGES and the
        ``mutable`` keys (a subset of ``xbm.config.MUTABLE_KEYS``: population-based training continues
        another run's state with explored values). This trainer's values of those keys hold from the next
        step on: the modules were built with them, and the optimiser's lr and weight decay are re-applied
        after its state is loaded (the schedule keeps its progress, scaled to the new lr)."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"checkpoint version must be {STATE_VERSION}, but got {state.get('version')!r}")
        mutable = frozenset(mutable)
        unknown = sorted(mutable - set(MUTABLE_KEYS))
        if unknown:
            raise ValueError(f"mutable keys must be among {list(MUTABLE_KEYS)}, but got {unknown}")
        saved, ours = TrainConfig.from_dict(state["config"]).to_dict(), self.cfg.to_dict()
        changed = sorted(k for k in ours if saved.get(k) != ours[k] and k not in RESUMABLE_CHANGES | mutable)
        if changed:
            raise ValueError("a checkpoint must be resumed with the config it was saved with, but these keys "
                             "differ: " + ", ".join(f"{k} (saved {saved.get(k)!r}, now {ours[k]!r})" for k in changed))
        self.model.load_state_dict(state["model"])
        load_optimizer_state(self.optimizer, state["optimizer"])
        load_optimizer_state(self.warmup_optimizer, state["warmup_optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        rescale_optimizer(self.optimizer, self.scheduler, lr=(saved["lr"], ours["lr"]),
                          weight_decay=(saved["weight_decay"], ours["weight_decay"]))
        if state["scaler"]:  # empty from a run without loss scaling (CPU, bf16): a resumed fp16 run starts afresh
            self.scaler.load_state_dict(state["scaler"])
        if self.xbm is not None:
            self.xbm.load_state_dict(state["xbm"])
        if state["sampler_labels"] is not None:
            self.loader.sampler.sampler.labels[:] = list(state["sampler_labels"])
        self.objective.load_state_dict(state.get("objective", {}))
        self.ahead = None   # a pass this trainer drew ahead is replaced by the saved state; its loader resets
        self.passes = int(state["passes"])
        self.references = state["references"]
        start_persistent_workers(self.loader)  # its one RNG draw before the restore, as in the run saved
        set_rng_state(state["rng"])
        probe = state["previous_probe"]
        self.previous_probe = None if probe is None else probe.cpu()
        if "step_drift" in state:   # absent from checkpoints older than drift at Δt: it starts afresh
            self.step_drift.load_state_dict(state["step_drift"])
        self.epoch = int(state["epoch"])
        self.warmup_done = bool(state["warmup_done"])


def _kalman_gain(xbm: Optional[XBMLoss]) -> Optional[float]:
    """``kalman_gain``: the gain K AXBN used at its last step (AXBN paper Algorithm 1, line 2); None for
    another normaliser, without a memory, or before the filter's first step (e.g. during the delay)."""
    normaliser = None if xbm is None else xbm.normaliser
    return normaliser.current_gain if isinstance(normaliser, AXBN) else None


def _sampler_labels(sampler) -> Optional[list[int]]:
    labels = getattr(sampler, "labels", None)
    return None if labels is None else [int(c) for c in labels]


def _peak_memory(device: torch.device) -> Callable[[], Optional[float]]:
    """Start measuring the device's peak allocated memory; the returned function reads it in GiB (None on
    the CPU, which has no such counter)."""
    if device.type != "cuda":
        return lambda: None
    torch.cuda.reset_peak_memory_stats(device)
    return lambda: torch.cuda.max_memory_allocated(device) / 2**30


def _stop_workers(loader, embed: Embedder) -> None:
    """The workers of a trainer's training loader and of its evaluation loaders, stopped while their queues
    are whole (``xbm.training.loaders.stop_workers``)."""
    stop_workers(loader)
    embed.close()


def _on(transform, device: torch.device):
    """A batch transform with its buffers (statistics) on ``device``."""
    return transform.to(device) if isinstance(transform, torch.nn.Module) else transform
