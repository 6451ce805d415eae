"""``--scheduler pbt``: population-based training (Jaderberg et al. 2017), Ray's ``PopulationBasedTraining`` with
the guards and a record of every exploit (the Parquet sink's ``exploits`` column). PB2 (``tune.search.pb2``)
shares the record and the population check."""
from __future__ import annotations

from typing import Any

from ray.tune.schedulers import PopulationBasedTraining

from tune.errors import SweepInputError
from tune.search.guards import TIME_ATTR, GuardedScheduler


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


class ClipToBounds:
    """PBT's and PB2's ``custom_explore_fn``: each explored value clipped to its bounds, as a plain Python
    number (an int for int bounds). Ray's PBT multiplies a range's value by 0.8 or 1.2 and does not clip it:
    a lambda_mu of 0.97 explored to 1.17, which the config refuses (``lambda_mu <= 1``), and the sweep
    stopped (seen in CI). Ray's PB2 maps the GP's point back to ``lo + x * (hi - lo)`` and casts it to
    float32, which can land just outside the bounds (float32(3e-3) > 3e-3)."""

    def __init__(self, bounds: dict[str, list[float]]) -> None:
        self.bounds = bounds

    def __call__(self, config: dict[str, Any]) -> dict[str, Any]:
        for key, (lo, hi) in self.bounds.items():
            if key in config:
                value = min(max(float(config[key]), lo), hi)
                config[key] = int(round(value)) if isinstance(lo, int) and isinstance(hi, int) else value
        return config


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
    # a range is explored by multiplying its value (kept inside by the clip); a choice moves along its list
    ranges = {key: list(space.params[key].branches[0].dist.numeric_bounds())
              for key, mutation in mutations.items() if not isinstance(mutation, list)}
    return RecordingPBT(time_attr=TIME_ATTR, perturbation_interval=options.perturbation_interval,
                        hyperparam_mutations=mutations, quantile_fraction=0.25, synch=options.pbt_synch,
                        custom_explore_fn=ClipToBounds(ranges))
