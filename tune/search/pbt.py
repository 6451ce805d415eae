"""``--scheduler pbt``: population-based training (Jaderberg et al. 2017), Ray's ``PopulationBasedTraining`` with
the guards and a record of every exploit (the Parquet sink's ``exploits`` column). PB2 (``tune.search.pb2``)
shares the record and the population check."""
from __future__ import annotations

from typing import Any

from ray.tune.schedulers import PopulationBasedTraining

from tune.options import SweepInputError
from tune.trial.guards import TIME_ATTR, GuardedScheduler


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


def check_population(options, space) -> None:
    """What PBT and PB2 both need: ``mutable: true`` params to explore, and a population drawn at random."""
    name = options.scheduler
    if space is None or not space.mutable:
        raise SweepInputError(f"--scheduler {name} needs params marked 'mutable: true' in the space (e.g. "
                              "normaliser.lambda_mu: {uniform: [0.0, 1.0], mutable: true}): they are what it explores")
    if options.search != "random":
        raise SweepInputError(f"--scheduler {name} draws its population with --search random, but got --search "
                              f"{options.search}: it changes the configs itself, which a searcher cannot follow")


def build_pbt(options, space) -> RecordingPBT:
    """Every ``--perturbation-interval`` epochs the bottom quarter of the population (by the sweep's metric)
    copies a top-quarter trial's state and perturbs the space's ``mutable: true`` params."""
    check_population(options, space)
    mutations = space.mutations()
    return RecordingPBT(time_attr=TIME_ATTR, perturbation_interval=options.perturbation_interval,
                        hyperparam_mutations=mutations, quantile_fraction=0.25, synch=options.pbt_synch)
