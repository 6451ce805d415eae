"""Stopping on this project's own signals and on the sweep's budgets, under every scheduler.

``Guards`` is asked first on every result (``GuardedScheduler``, a mixin every scheduler of the registry
has): its decision wins over the scheduler's, so a trial stops at once instead of holding its slot until
the next rung. A trial stops when

- its loss saw no positive pair (``xbm.evaluate.signals.collapsed``) for ``COLLAPSED_EPOCHS`` consecutive main
  epochs (the trial learns nothing);
- its best Recall@1 is still below ``reference_raw_recall_at_1`` (nearest neighbours on the inputs
  themselves) at its first evaluated epoch >= ``raw_epoch`` = max(``grace_period``, ``RAW_MIN_EPOCHS``);
  epochs ``eval_every`` skipped (NaN Recall@1) are not judged. The floor is ours, not the issue's: a model
  trained from scratch is often still below raw pixels after one epoch (Omniglot small, resnet18 at 32 px:
  0.44-0.46 at epoch 1 against raw pixels' 0.59, 0.63-0.88 later), and ASHA's default grace period is 1,
  so judging there would stop every trial of such a sweep;
- the sweep's budget is spent (``Budget``): the searcher is told it is finished, trials not started are
  dropped, and each running trial is stopped at its next result, i.e. when its current epoch ends (logged
  once at INFO, logger ``tune.search.guards``; ``xbm-tune sweep`` ends on the same news).

Each stop writes its reason into ``stop_reasons`` (shared with the Parquet sink, ``stop_reason``).
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from xbm.evaluate.signals import below_raw, collapsed

#: every scheduler's time attribute: the trainer's 1-based epoch, continuous across restores
TIME_ATTR = "epoch"

#: consecutive collapsed main epochs that stop a trial
COLLAPSED_EPOCHS = 2
#: the earliest epoch the below-raw-pixels rule judges (module docstring)
RAW_MIN_EPOCHS = 3
BUDGET_REASON = "budget"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Budget:
    """The sweep's budgets: ``time_s`` of the driver's wall time since the first trial was added, and
    ``gpu_hours`` = sum over trials of wall time x GPUs (the sink's ``gpu_hours``; a running trial counts up
    to its last reported epoch). None = no budget."""

    time_s: float | None = None
    gpu_hours: float | None = None

    def spent(self, elapsed_s: float, gpu_hours: float) -> str | None:
        """The reason the budget is spent, else None."""
        if self.time_s is not None and elapsed_s >= self.time_s:
            return f"{BUDGET_REASON}: the time budget ({format_duration(self.time_s)}) was spent"
        if self.gpu_hours is not None and gpu_hours >= self.gpu_hours:
            return f"{BUDGET_REASON}: the GPU-hour budget ({self.gpu_hours:g} h, {gpu_hours:.3g} used) was spent"
        return None

    @property
    def active(self) -> bool:
        return self.time_s is not None or self.gpu_hours is not None


def parse_duration(text: str | float) -> float:
    """``--time-budget``: seconds from ``90``, ``90s``, ``30m``, ``2h`` (a number alone is seconds)."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    raw = str(text).strip().lower()
    scale = units.get(raw[-1:], None)
    number = raw[:-1] if scale is not None else raw
    try:
        value = float(number) * (scale or 1.0)
    except ValueError:
        raise ValueError(f"--time-budget must be a number of seconds or a duration such as 90s, 30m or 2h, "
                         f"but got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"--time-budget must be > 0, but got {text!r}")
    return value


def format_duration(seconds: float) -> str:
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and (seconds / size).is_integer():
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


class Guards:
    """Collapse-aware stopping (``stop_collapsed``) and the budget, for one sweep (driver side)."""

    def __init__(self, stop_reasons: dict, stop_collapsed: bool = True, grace_period: int = 1,
                 budget: Budget = Budget(), gpus_per_worker: float | None = None) -> None:
        self.stop_reasons = stop_reasons
        # a trial's GPUs: its workers x these (tune.results.trial_config.trial_gpus)
        self.gpus_per_worker = gpus_per_worker
        self.stop_collapsed, self.grace_period, self.budget = stop_collapsed, grace_period, budget
        self.spent: str | None = None  # the budget's reason once spent
        self.clock = time.monotonic  # the driver's clock for the time budget (a test moves it)
        self._started: float | None = None
        self._streak: dict[str, tuple[int, int]] = {}  # trial id -> (last epoch, consecutive collapsed epochs)
        self._best: dict[str, float] = {}  # trial id -> best finite recall_at_1 so far

    @property
    def raw_epoch(self) -> int:
        """The first epoch the below-raw-pixels rule judges: the grace period, at least RAW_MIN_EPOCHS."""
        return max(self.grace_period, RAW_MIN_EPOCHS)

    def judge(self, trial_id: str, result: dict[str, Any]) -> str | None:
        """Why this result stops its trial (the stop reason), else None."""
        if self.spent is not None:
            return self.spent
        if not self.stop_collapsed:
            return None
        epoch = int(result.get(TIME_ATTR) or 0)
        last, streak = self._streak.get(trial_id, (0, 0))
        streak = (streak + 1 if epoch == last + 1 else 1) if collapsed(result) else 0
        self._streak[trial_id] = (epoch, streak)
        if streak >= COLLAPSED_EPOCHS:
            return (f"collapsed: the loss saw no positive pair (loss_pos_pairs=0) for {streak} consecutive epochs "
                    f"at epoch {epoch}")
        recall = result.get("recall_at_1")
        if not isinstance(recall, (int, float)) or not math.isfinite(recall):
            return None  # not evaluated this epoch (eval_every): judged at the next evaluated one
        best = self._best[trial_id] = max(self._best.get(trial_id, -math.inf), float(recall))
        raw = result.get("reference_raw_recall_at_1")
        if epoch >= self.raw_epoch and below_raw(best, raw):
            return (f"below raw pixels: best recall_at_1={best:.4g} < reference_raw_recall_at_1={float(raw):.4g} "
                    f"at epoch {epoch} (judged from epoch {self.raw_epoch}: the grace period, at least "
                    f"{RAW_MIN_EPOCHS})")
        return None

    def check_budget(self, controller, reporting=None, result: dict | None = None) -> None:
        """Once the budget is spent: no new trial (the searcher is finished, trials not started are dropped);
        running trials stop at their next result (``judge``). ``reporting`` is the trial whose ``result``
        Tune is handing out (its ``last_result`` is still the one before)."""
        if not self.budget.active or self.spent is not None:
            return
        now = self.clock()
        if self._started is None:
            self._started = now
        trials = controller.get_trials()
        gpus = getattr(self, "gpus_per_worker", None)  # absent from guards pickled by older versions
        used = sum(_gpu_hours(t, result if t is reporting else t.last_result, gpus) for t in trials)
        self.spent = self.budget.spent(now - self._started, used)
        if self.spent is None:
            return
        log.info("%s: no new trial starts; running trials stop when their current epoch ends", self.spent)
        controller.search_alg.set_finished()
        for trial in trials:
            if trial.status == Trial.PENDING:
                self.stop_reasons[trial.trial_id] = f"{self.spent} before it started"
                controller.stop_trial(trial)


def _gpu_hours(trial, result: dict | None, gpus_per_worker: float | None = None) -> float:
    from tune.results.trial_config import gpu_hours, trial_gpus

    return gpu_hours(float((result or {}).get("time_total_s") or 0.0), trial_gpus(trial, gpus_per_worker))


class GuardedScheduler(TrialScheduler):
    """The base put first in every scheduler's bases (the registry's type, ``tune.search.interfaces``; Ray's
    scheduler class follows it, so ``super()`` reaches that scheduler's own rules): ``guards`` (set by
    ``tune.search.schedulers.build_scheduler``; None = plain scheduler) judges each result before the scheduler
    does, and checks the budget whenever Tune looks for a trial to run and at every result."""

    guards: Guards | None = None

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        if self.guards is not None:
            self.guards.check_budget(tune_controller, trial, result)
            reason = self.guards.judge(trial.trial_id, result)
            if reason is not None:
                self.guards.stop_reasons[trial.trial_id] = reason
                return TrialScheduler.STOP
        return super().on_trial_result(tune_controller, trial, result)

    def choose_trial_to_run(self, tune_controller):
        if self.guards is not None:
            self.guards.check_budget(tune_controller)
            if self.guards.spent is not None:
                return None
        return super().choose_trial_to_run(tune_controller)
