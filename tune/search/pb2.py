"""``--scheduler pb2``: Population Based Bandits (Parker-Holder et al. 2020, "Provably Efficient Online
Hyperparameter Optimization with Population-Based Bandits"), Ray's ``PB2``.

PB2 is PBT (``tune.search.pbt.RecordingPBT``: the same exploit of a donor's whole checkpoint, the same
``--perturbation-interval``, the same exploits record) whose explore does not multiply values by 0.8 / 1.2
but picks them with a time-varying GP bandit (GP-UCB over the change of the metric per epoch). The GP
works on each mutable param scaled to ``[0, 1]`` between its bounds (``hyperparam_bounds``), i.e. in
linear space: a log-uniform param keeps its ``[lo, hi]``, and values in its lower decades fill only a sliver
of the GP's range (``lr: {loguniform: [1e-6, 1e-2]}``: below 1e-3 is 10 % of it). The initial population is
drawn from the space's own distributions (``--search random``), log-uniform included.

Ray 2.60's PB2 fits its GP with scikit-learn (``sklearn.gaussian_process``), one of this package's own
dependencies; GPy was the GP library of Ray's first PB2 and is not needed.
"""
from __future__ import annotations

from ray.tune.schedulers.pb2 import PB2  # imports without scikit-learn (Ray checks it when PB2 is built)

from tune.errors import SweepInputError, require
from tune.search.guards import TIME_ATTR, GuardedScheduler
from tune.search.pbt import ClipToBounds, RecordsExploits


def hyperparam_bounds(space) -> dict[str, list[float]]:
    """PB2's ``hyperparam_bounds`` from the space: each mutable param's ``[lo, hi]``. uniform, loguniform
    and int give their own bounds; a choice of numbers gives ``[min, max]`` (PB2 then explores the whole
    interval, not only the listed values). A mutable param with a value that is not a number raises
    SweepInputError naming it: a GP bandit needs numbers."""
    bounds = {}
    for key in space.mutable:
        dist = space.params[key].branches[0].dist
        numeric = dist.numeric_bounds()
        if numeric is None:
            raise SweepInputError(f"--scheduler pb2 explores numbers between bounds, but the mutable param {key!r} is "
                                  f"{dist.describe()}: give it a numeric distribution (uniform, loguniform, int or "
                                  f"a choice of numbers), or use --scheduler pbt, which resamples choices")
        bounds[key] = [numeric[0], numeric[1]]
    return bounds


class RecordingPB2(GuardedScheduler, RecordsExploits, PB2):
    """Ray's PB2 with the guards and the exploits record (Tune pickles it with the experiment: module level)."""


def build_pb2(options, space) -> RecordingPB2:
    """The sweep's PB2: the mutable params' bounds, the bottom quarter exploiting the top quarter."""
    require("sklearn", "--scheduler pb2", "pip install scikit-learn (a dependency of xbm-tune: `pip install .`)")
    bounds = hyperparam_bounds(space)
    return RecordingPB2(time_attr=TIME_ATTR, perturbation_interval=options.perturbation_interval,
                        hyperparam_bounds=bounds, quantile_fraction=0.25, synch=options.pbt_synch,
                        custom_explore_fn=ClipToBounds(bounds))
