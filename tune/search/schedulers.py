"""Schedulers registry (``--scheduler``): ``asha``, ``hyperband``, ``fifo``, ``pbt``, ``pb2``; time attribute =
``epoch``.

ASHA (Li et al. 2020, "A System for Massively Parallel Hyperparameter Tuning", Algorithm 2) judges a
trial at rungs ``grace_period * reduction_factor**k`` (k = 0, 1, ... while <= max_epochs) and stops it
when its metric is outside the rung's top ``1 / reduction_factor`` quantile: below it under ``--mode max``,
above it under ``--mode min`` (Ray's scheduler takes the sweep's mode from the ``TuneConfig``; the stop
reason says which). Ray's ASHA silently never stops a trial whose results lack the time attribute; the
trainer's results always carry ``epoch`` (1-based, continuous across restores). ``--rungs`` places ASHA's rungs at given epochs instead
(``PlacedASHA``; ``tune.search.rungs`` computes them: before each LR drop, after the normaliser's delay).

Each scheduler here records why it stopped a trial (``stop_reasons``: trial_id -> text), which the
Parquet sink writes as ``stop_reason``. Every one is a ``tune.search.guards.GuardedScheduler``: collapse-aware
stopping (``--no-stop-collapsed`` turns it off) and the budgets (``--time-budget``, ``--gpu-hours-budget``)
judge each result first, whatever the scheduler.
"""
from __future__ import annotations

from typing import Any

from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler, HyperBandScheduler, TrialScheduler
from ray.tune.schedulers.async_hyperband import _Bracket

from tune.errors import SweepInputError
from tune.search.guards import TIME_ATTR, Budget, GuardedScheduler, Guards
from tune.search.interfaces import SchedulerBuilder
from tune.search.pbt import build_pbt, check_population
from tune.search.rungs import rung_epoch, rung_epochs
from tune.search.spaces.fairness import GEOMETRIC_RUNGS
from tune.search.spaces.space import SearchSpace

class _RecordsStops:
    """Mixin: remember a STOP decision with the epoch and value it was taken on."""

    label = ""

    def __init__(self, stop_reasons: dict, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stop_reasons = stop_reasons  # shared with the Parquet sink: trial_id -> why it was stopped
        self._max_t_attr = kwargs["max_t"]

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        decision = super().on_trial_result(tune_controller, trial, result)
        epoch = result.get(TIME_ATTR)
        if decision == TrialScheduler.STOP and epoch is not None and epoch < self._max_t_attr:
            value = result.get(self._metric)
            shown = f"{value:.4g}" if isinstance(value, (int, float)) else value
            # worse than the cutoff: below it when maximising, above it when minimising (--mode min)
            side = "above" if getattr(self, "_mode", None) == "min" else "below"
            self.stop_reasons[trial.trial_id] = (f"{self.label}: {self._metric}={shown} {side} the rung cutoff "
                                                 f"at epoch {epoch}")
        return decision


class RecordingASHA(GuardedScheduler, _RecordsStops, AsyncHyperBandScheduler):
    label = "asha"


class _PlacedBracket(_Bracket):
    """Ray's ASHA bracket with its rungs at the given epochs: ``on_result`` judges a trial once per rung, at
    its first result at or past the rung, against the top ``1 / reduction_factor`` quantile of the values
    recorded there, whatever the spacing of the rungs."""

    def __init__(self, rungs: tuple[int, ...], reduction_factor: float, stop_last_trials: bool = True) -> None:
        super().__init__(rungs[0], rungs[-1], reduction_factor, 0, stop_last_trials=stop_last_trials)
        self._rungs = [(epoch, {}) for epoch in reversed(rungs)]  # descending, as Ray's bracket walks them


class PlacedASHA(RecordingASHA):
    """ASHA (one bracket) whose rungs are an explicit list of epochs (``--rungs schedule`` or ``E1,E2,...``)."""

    def __init__(self, stop_reasons: dict, rungs: tuple[int, ...], **kwargs: Any) -> None:
        if not rungs or list(rungs) != sorted(set(rungs)) or rungs[0] < 1 or rungs[-1] > kwargs["max_t"]:
            raise SweepInputError(f"rungs must be increasing epochs in 1..{kwargs['max_t']} (max_t), but got "
                                  f"{list(rungs)}")
        super().__init__(stop_reasons, grace_period=rungs[0], **kwargs)
        self._brackets = [_PlacedBracket(tuple(rungs), self._reduction_factor, self._stop_last_trials)]


class RecordingHyperBand(GuardedScheduler, _RecordsStops, HyperBandScheduler):
    label = "hyperband"


class GuardedFIFO(GuardedScheduler, FIFOScheduler):
    """FIFO: no early stopping of its own, only the guards'."""


def _asha(options: Any, max_epochs: int, stop_reasons: dict[str, str],
          space: SearchSpace | None = None) -> GuardedScheduler:
    common = {"time_attr": TIME_ATTR, "max_t": max_epochs, "reduction_factor": options.reduction_factor}
    if options.rungs == GEOMETRIC_RUNGS:  # Ray's own rungs, as before --rungs
        return RecordingASHA(stop_reasons, grace_period=options.grace_period, **common)
    return PlacedASHA(stop_reasons, rung_epochs(options, space, max_epochs), **common)


def _hyperband(options: Any, max_epochs: int, stop_reasons: dict[str, str],
               space: SearchSpace | None = None) -> GuardedScheduler:
    return RecordingHyperBand(stop_reasons, time_attr=TIME_ATTR, max_t=max_epochs,
                              reduction_factor=options.reduction_factor)


def _fifo(options: Any, max_epochs: int, stop_reasons: dict[str, str],
          space: SearchSpace | None = None) -> GuardedScheduler:
    return GuardedFIFO()


def _pbt(options: Any, max_epochs: int, stop_reasons: dict[str, str],
         space: SearchSpace | None = None) -> GuardedScheduler:
    return build_pbt(options, space)


def _pb2(options: Any, max_epochs: int, stop_reasons: dict[str, str],
         space: SearchSpace | None = None) -> GuardedScheduler:
    """PBT whose explore picks the new values with a GP bandit (``tune.search.pb2``)."""
    from tune.search.pb2 import build_pb2  # Ray's pb2 module imports scikit-learn: only when asked for

    check_population(options, space)
    return build_pb2(options, space)


#: name -> factory(options, max_epochs, stop_reasons, space) -> TrialScheduler
SCHEDULERS: dict[str, SchedulerBuilder] = {
    "asha": _asha, "hyperband": _hyperband, "fifo": _fifo, "pbt": _pbt, "pb2": _pb2}


def decision_epochs(scheduler: TrialScheduler, max_epochs: int) -> tuple[int, ...]:
    """The epochs at which ``scheduler`` may stop a trial: a trial evaluates them whatever its
    ``eval_every``, so every decision is taken on a measured value. ASHA: its rungs (every bracket's);
    FIFO: none; any other scheduler: every epoch (no saving, but no blind decision either). With
    collapse-aware stopping, also the epoch the below-raw-pixels rule judges (``Guards.raw_epoch``)."""
    guards = getattr(scheduler, "guards", None)
    grace = {guards.raw_epoch} if guards is not None and guards.stop_collapsed else set()
    if type(scheduler) in (FIFOScheduler, GuardedFIFO):  # every other scheduler subclasses FIFOScheduler
        epochs = set()
    elif isinstance(scheduler, AsyncHyperBandScheduler):
        epochs = set(asha_rungs(scheduler))
    else:
        epochs = set(range(1, max_epochs + 1))
    return tuple(sorted(e for e in epochs | grace if e <= max_epochs))


def asha_rungs(scheduler: AsyncHyperBandScheduler) -> tuple[int, ...]:
    """The epochs an ASHA scheduler judges trials at (every bracket's rungs; a fractional rung at the first
    whole epoch past it): what sweep.json records as ``rungs``."""
    return tuple(sorted({rung_epoch(m) for bracket in scheduler._brackets for m, _ in bracket._rungs}))


def build_scheduler(options: Any, max_epochs: int, stop_reasons: dict[str, str],
                    space: SearchSpace | None = None) -> GuardedScheduler:
    """The ``--scheduler``; ``space`` (a ``tune.search.spaces.SearchSpace``) gives PBT and PB2 their mutable params."""
    if options.scheduler not in SCHEDULERS:
        raise SweepInputError(f"--scheduler must be one of {sorted(SCHEDULERS)}, but got {options.scheduler!r}")
    scheduler = SCHEDULERS[options.scheduler](options, max_epochs, stop_reasons, space)
    budget = Budget(options.time_budget_s, options.gpu_hours_budget)
    if options.stop_collapsed or budget.active:
        scheduler.guards = Guards(stop_reasons, options.stop_collapsed, options.grace_period, budget,
                                  options.gpus_per_worker)
    return scheduler

