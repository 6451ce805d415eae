"""The run of :class:`xbm.trainer.Trainer`: the warm-up, the main epochs, evaluation and the checkpoint state,
over the parts ``TrainerParts`` built (``parts.py``). The protocol: :mod:`xbm.trainer`."""
from __future__ import annotations

import functools
import time
from typing import Any, Callable, Iterable, Iterator, Optional

import torch

from xbm.config import MUTABLE_KEYS, TrainConfig
from xbm.data import DatasetSplits
from xbm.evaluate import epoch as evaluation
from xbm.losses.xbm_loss import XBMLoss
from xbm.normalisers.axbn import AXBN
from xbm.trainer.parts import TrainerParts
from xbm.training.distributed import Ranks
from xbm.training.epoch import EpochResult, Step, run_epoch
from xbm.training.loaders import DrawnPass, start_persistent_workers
from xbm.training.optim import load_optimizer_state, rescale_optimizer
from xbm.training.parallel import on_main, share_buffers, share_rng
from xbm.training.prefill import prefill
from xbm.training.reuse import Reuse
from xbm.training.rng import rng_isolated, rng_state, set_rng_state

STATE_VERSION = 2
# Keys that may differ between a checkpoint and the config resuming it: the state fits either way (more
# epochs, another device, other loader workers, where the data and the image cache live). Augmentations
# are seeded per drawn sample (xbm.training.loaders.SeededSampler), so the worker count changes nothing.
RESUMABLE_CHANGES = frozenset({"epochs", "device", "num_workers", "data_root", "image_cache", "evaluate_test",
                               "eval_every", "compile", "prefetch_next_epoch"})
#: the metrics that measure the machine, not the run: they differ between two identical runs
TIMING_KEYS = ("epoch_time_s", "images_per_s", "train_s", "data_wait_s", "eval_s", "gpu_memory_peak_gib")


class Trainer(TrainerParts):
    """A training run: its data, model, memory, normaliser and loss, built from one config (``TrainerParts``);
    ``fit`` trains it and yields each epoch's metrics.

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
        super().__init__(cfg, splits, cpus, ranks, eval_progress)
        self.evaluate_at = frozenset(int(e) for e in evaluate_at)
        self.reuse = Reuse(reuse_dir)
        self.reused_references = self.reused_warmup = False
        self.progress = progress
        self.passes = 0  # passes over the training data so far: the augmentation seeds' epoch
        self.previous_probe: Optional[torch.Tensor] = None
        self.references: Optional[dict[str, float]] = None
        self.epoch = 0
        self.warmup_done = cfg.warmup_epochs == 0
        self.ahead: Optional[DrawnPass] = None   # the next main epoch's pass, drawn early (prefetch_next_epoch)

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
        """Drop a pass drawn ahead, then stop the loader workers and let go of the process group
        (``TrainerParts.close``)."""
        self.ahead = None
        super().close()

    # ---- evaluation ----------------------------------------------------------------------------
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
