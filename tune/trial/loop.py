"""A trial's epoch loop, shared by a one-worker trial (``tune.trial.trainable.run_trial``, in the Tune actor) and
by rank 0 of a data-parallel trial (``tune.trial.data_parallel``, in a Ray Train worker).

The two differ only in where a result goes: ``ray_tune.report`` for one worker, ``ray.train.report`` for rank
0 (Ray Train forwards it, and the checkpoint it persisted, to Tune: ``tune.trial.data_parallel.ForwardToTune``).
A :class:`Reporter` is that choice: ``report(row, folder=None)``, ``folder`` a local folder to persist as
the result's checkpoint. Everything else is the module docstring of ``tune.trial.trainable``: the live line, the
best weights, the checkpoint clock and the cost columns (``setup_s``, ``checkpoint_s``).
"""
from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from tune.results import live
from tune.trial.checkpoints import TRIAL_STATE, CheckpointClock
from xbm.training.best_weights import BestWeights

CHECKPOINT_FILE = "trainer.pt"
#: trial-level facts of every row: set-up seconds, the best weights' URI
SETUP_KEY, BEST_WEIGHTS_KEY = "setup_s", "best_weights"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reporter:
    """Where a trial's results go: ``send(metrics, checkpoint)`` with ``checkpoint`` built by
    ``checkpoint_from(folder)`` (``ray_tune.Checkpoint.from_directory`` or Ray Train's own)."""

    send: Callable[..., None]
    checkpoint_from: Callable[[str], Any]

    def report(self, row: Mapping[str, Any], folder: Optional[str] = None) -> None:
        # both persist the folder to the trial's storage before they return
        if folder is None:
            self.send(dict(row))
        else:
            self.send(dict(row), checkpoint=self.checkpoint_from(folder))


def tune_reporter() -> Reporter:
    from ray import tune as ray_tune

    return Reporter(ray_tune.report, ray_tune.Checkpoint.from_directory)


@dataclass
class TrialLoop:
    """One run of a trial from its first epoch to its last (or the scheduler's stop): ``cfg`` its resolved
    TrainConfig; ``where`` the location keys every row carries (node, GPUs, relocated paths); ``started``
    the ``time.perf_counter()`` of the run's start (``setup_s`` is measured from it, and added to the set-up
    of the starts before the checkpoint it restores); ``best_before_report``: wait for each best-weights write
    before reporting its epoch (a data-parallel rank 0: Tune kills it at a stop and cannot wait for it)."""

    trial_id: str
    cfg: Any
    metric: str
    mode: str
    policy: Any  # tune.trial.base.TrialPolicy
    sweep: Optional[str]
    where: Mapping[str, Any]
    best: BestWeights
    reporter: Reporter
    started: float
    best_before_report: bool = False
    clock: CheckpointClock = field(init=False)
    epoch: int = field(default=0, init=False)  # the last epoch reported
    earlier_setup_s: float = field(default=0.0, init=False)  # set-up of the starts before the checkpoint restored

    def __post_init__(self) -> None:
        self.clock = CheckpointClock(self.policy.checkpoint_period_s)

    def restore(self, trainer, folder: Optional[str]) -> None:
        """Load a checkpoint folder (``CHECKPOINT_FILE`` and the policy's ``TRIAL_STATE``) into ``trainer``
        and the best weights' record, unless an exploit's donor wrote it (PBT: the donor kept its best
        elsewhere)."""
        if folder is None:
            return
        load_trainer_state(trainer, folder, self.policy.mutable)
        policy_state = _read_json(Path(folder) / TRIAL_STATE)
        # Tune restores wall_time_s (time_total_s) from the checkpoint's row, a donor's too (PBT): the set-up
        # paid up to that row goes with it, so that the parts still sum to the wall time after a restart
        self.earlier_setup_s = float(policy_state.get(SETUP_KEY, 0.0))
        if policy_state.get("trial_id", self.trial_id) == self.trial_id:
            self.best.load_state(policy_state.get("best", {}))

    def run(self, trainer) -> None:
        """Report every epoch of ``trainer.fit()``, with a full checkpoint when the clock (or PBT's
        interval, or the last epoch) says so."""
        import torch

        setup = {SETUP_KEY: self.earlier_setup_s + time.perf_counter() - self.started}
        cfg, metric = self.cfg, self.metric
        model = getattr(trainer.model, "module", trainer.model)  # the weights without a DDP wrapper's prefix
        written_s = 0.0  # writing the last checkpoint, billed to the next row
        for metrics in trainer.fit():
            epoch = self.epoch = int(metrics["epoch"])
            metrics.setdefault(metric, math.nan)  # an epoch eval_every skips: measured nothing
            log.info("%s", live.epoch_line(self.trial_id, metrics, cfg.epochs, metric, self.mode,
                                           live.published_best(self.sweep)))
            begun = time.perf_counter()
            # train_on=train+val|all (a refit) holds out nothing to select on: its product is the last epoch's
            self.best.offer(epoch, metrics[metric], model, {"config": cfg.to_dict(), "metric": metric,
                                                            "preprocessing": trainer.preprocessing_dict()},
                            always=cfg.train_on != "train")
            if self.best_before_report:
                self.best.wait()
            row = {**metrics, **self.where, **setup, BEST_WEIGHTS_KEY: self.best.uri}
            every = self.policy.checkpoint_every and epoch % self.policy.checkpoint_every == 0
            if not self.clock.due(metrics["epoch_time_s"], last=epoch >= cfg.epochs or bool(every)):
                self.reporter.report({**row, "checkpoint_s": written_s + time.perf_counter() - begun})
                written_s = 0.0
                continue
            self.best.wait()  # the checkpoint's trial state names the best epoch: it must be on storage
            with tempfile.TemporaryDirectory(prefix="xbm-ckpt-") as folder:
                torch.save(trainer.state_dict(), os.path.join(folder, CHECKPOINT_FILE))
                state = {"best": self.best.state(), "trial_id": self.trial_id, **setup}
                Path(folder, TRIAL_STATE).write_text(json.dumps(state))
                row["checkpoint_s"] = written_s + time.perf_counter() - begun
                reported = time.perf_counter()
                self.reporter.report(row, folder)
                written_s = time.perf_counter() - reported


def load_trainer_state(trainer, folder: str, mutable: tuple[str, ...] = ()) -> None:
    """``trainer.load_state_dict`` of a checkpoint folder's ``CHECKPOINT_FILE`` (weights_only: the state is
    tensors and plain values; a corrupt file is named, ``BadCheckpointError``)."""
    from xbm.training.checkpoint import load_checkpoint

    trainer.load_state_dict(load_checkpoint(Path(folder) / CHECKPOINT_FILE), mutable=mutable)


def follow(trainer, reporter: Reporter) -> None:
    """A data-parallel trial's other ranks: train in step with rank 0 and call ``ray.train.report`` once per
    epoch as it does (Ray Train wants every rank's report), with no result of their own."""
    for metrics in trainer.fit():
        reporter.report({"epoch": int(metrics["epoch"])})


def _read_json(path: Path) -> dict:
    """A checkpoint's policy state; {} for checkpoints written before it existed."""
    return json.loads(path.read_text()) if path.is_file() else {}
