"""Schedulers registry (``--scheduler``): ``asha``, ``hyperband``, ``fifo``, ``pbt``, ``pb2``; time attribute =
``epoch``.

ASHA (Li et al. 2020, "A System for Massively Parallel Hyperparameter Tuning", Algorithm 2) judges a
trial at rungs ``grace_period * reduction_factor**k`` (k = 0, 1, ... while <= max_epochs) and stops it
when its metric is below the rung's top ``1 / reduction_factor`` quantile. Ray's ASHA silently never
stops a trial whose results lack the time attribute; the trainer's results always carry ``epoch``
(1-based, continuous across restores).

Each scheduler here records why it stopped a trial (``stop_reasons``: trial_id -> text), which the
Parquet sink writes as ``stop_reason``. Every one is a ``tune.guards.GuardedScheduler``: collapse-aware
stopping (``--no-stop-collapsed`` turns it off) and the budgets (``--time-budget``, ``--gpu-hours-budget``)
judge each result first, whatever the scheduler.
"""
from __future__ import annotations

from typing import Any

from ray.tune.schedulers import (AsyncHyperBandScheduler, FIFOScheduler, HyperBandScheduler, PopulationBasedTraining,
                                 TrialScheduler)

from tune.guards import Budget, GuardedScheduler, Guards
from tune.options import SweepInputError

TIME_ATTR = "epoch"


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
            self.stop_reasons[trial.trial_id] = (f"{self.label}: {self._metric}={shown} below the rung cutoff "
                                                 f"at epoch {epoch}")
        return decision


class RecordingASHA(GuardedScheduler, _RecordsStops, AsyncHyperBandScheduler):
    label = "asha"


class RecordingHyperBand(GuardedScheduler, _RecordsStops, HyperBandScheduler):
    label = "hyperband"


class RecordsExploits:
    """Mixin for PBT and its subclasses (PB2): record every exploit. ``exploits`` maps the exploiting trial's
    id to its ``"<donor trial>@<donor's epoch>"`` entries, in order (the Parquet sink's ``exploits`` column).
    Ray's PB2 subclasses PBT and keeps its ``_exploit`` (it overrides only how the new config is chosen), so
    this one hook sees both schedulers' exploits."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.exploits: dict[str, list[str]] = {}

    def _exploit(self, tune_controller, trial, trial_to_clone):
        # the donor's checkpoint is the one it saved at its last perturbation (trials checkpoint every interval)
        epoch = self._trial_state[trial_to_clone].last_perturbation_time
        self.exploits.setdefault(trial.trial_id, []).append(f"{trial_to_clone.trial_id}@{int(epoch)}")
        return super()._exploit(tune_controller, trial, trial_to_clone)


class RecordingPBT(GuardedScheduler, RecordsExploits, PopulationBasedTraining):
    """Population-based training (Jaderberg et al. 2017) that records every exploit (``RecordsExploits``).
    The exploiting trial restarts from the donor's latest checkpoint (weights, optimiser, memory, normaliser
    state, objective state: ``Trainer.state_dict``) with the explored values of the mutable keys."""


class GuardedFIFO(GuardedScheduler, FIFOScheduler):
    """FIFO: no early stopping of its own, only the guards'."""


def _asha(options, max_epochs: int, stop_reasons: dict, space=None) -> TrialScheduler:
    return RecordingASHA(stop_reasons, time_attr=TIME_ATTR, max_t=max_epochs, grace_period=options.grace_period,
                         reduction_factor=options.reduction_factor)


def _hyperband(options, max_epochs: int, stop_reasons: dict, space=None) -> TrialScheduler:
    return RecordingHyperBand(stop_reasons, time_attr=TIME_ATTR, max_t=max_epochs,
                              reduction_factor=options.reduction_factor)


def _fifo(options, max_epochs: int, stop_reasons: dict, space=None) -> TrialScheduler:
    return GuardedFIFO()


def check_population(options, space) -> None:
    """What PBT and PB2 both need: ``mutable: true`` params to explore, and a population drawn at random."""
    name = options.scheduler
    if space is None or not space.mutable:
        raise SweepInputError(f"--scheduler {name} needs params marked 'mutable: true' in the space (e.g. "
                              "normaliser.lambda_mu: {uniform: [0.0, 1.0], mutable: true}): they are what it explores")
    if options.search != "random":
        raise SweepInputError(f"--scheduler {name} draws its population with --search random, but got --search "
                              f"{options.search}: it changes the configs itself, which a searcher cannot follow")


def _pbt(options, max_epochs: int, stop_reasons: dict, space=None) -> TrialScheduler:
    """Every ``--perturbation-interval`` epochs the bottom quarter of the population (by the sweep's metric)
    copies a top-quarter trial's state and perturbs the space's ``mutable: true`` params."""
    check_population(options, space)
    mutations = space.mutations()
    return RecordingPBT(time_attr=TIME_ATTR, perturbation_interval=options.perturbation_interval,
                        hyperparam_mutations=mutations, quantile_fraction=0.25, synch=options.pbt_synch)


def _pb2(options, max_epochs: int, stop_reasons: dict, space=None) -> TrialScheduler:
    """PBT whose explore picks the new values with a GP bandit (``tune.pb2``)."""
    from tune.pb2 import build_pb2  # Ray's pb2 module imports scikit-learn: only when asked for

    check_population(options, space)
    return build_pb2(options, space)


#: name -> factory(options, max_epochs, stop_reasons, space) -> TrialScheduler
SCHEDULERS = {"asha": _asha, "hyperband": _hyperband, "fifo": _fifo, "pbt": _pbt, "pb2": _pb2}


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
        epochs = {int(m) for bracket in scheduler._brackets for m, _ in bracket._rungs}
    else:
        epochs = set(range(1, max_epochs + 1))
    return tuple(sorted(e for e in epochs | grace if e <= max_epochs))


def build_scheduler(options, max_epochs: int, stop_reasons: dict, space=None) -> TrialScheduler:
    """The ``--scheduler``; ``space`` (a ``tune.spaces.SearchSpace``) gives PBT and PB2 their mutable params."""
    if options.scheduler not in SCHEDULERS:
        raise SweepInputError(f"--scheduler must be one of {sorted(SCHEDULERS)}, but got {options.scheduler!r}")
    scheduler = SCHEDULERS[options.scheduler](options, max_epochs, stop_reasons, space)
    budget = Budget(options.time_budget_s, options.gpu_hours_budget)
    if options.stop_collapsed or budget.active:
        scheduler.guards = Guards(stop_reasons, options.stop_collapsed, options.grace_period, budget,
                                  options.gpus_per_worker)
    return scheduler

