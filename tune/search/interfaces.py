"""The interface of each strategy a sweep plugs in, as Optuna's ``BaseSampler`` / ``BasePruner``: a searcher
builder and a scheduler builder, whose schedulers are all ``GuardedScheduler``s (``tune.search.guards``: Ray's
``TrialScheduler`` with the guards judging first). The registries (``SEARCHERS`` in ``searchers.py``,
``SCHEDULERS`` in ``schedulers.py``) map names to builders of these types; ``tune.driver.plan.SweepPlan`` holds
what they built. A new strategy is one builder of the right shape, registered by name.

``options`` is the sweep's ``tune.driver.options.SweepOptions``, typed ``Any`` here: the driver sits above this
package and imports it, so nothing here may import the driver back.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Union

from ray.tune.search import SearchAlgorithm, Searcher

from tune.search.guards import GuardedScheduler

if TYPE_CHECKING:
    from tune.search.spaces.space import SearchSpace
    from tune.search.warm_start import WarmStart

#: what Tune's ``search_alg`` takes: a ``Searcher`` (Optuna's, ``FixedConfigs``) or a ``SearchAlgorithm`` (Ray's
#: variant generator, for random and grid search)
SearchAlg = Union[Searcher, SearchAlgorithm]


class SearcherBuilder(Protocol):
    """``--search NAME``: the search algorithm and the Tune ``param_space`` of the swept parameters (the space's
    own sampling where the searcher samples nothing, e.g. random and grid). ``budget`` is the epoch budget,
    ``warm`` an earlier sweep's points to start from (an Optuna searcher's study lives in memory until
    ``keep_study`` moves it into the sweep's folder)."""

    def __call__(self, space: SearchSpace, options: Any, budget: int,
                 warm: WarmStart | None) -> tuple[SearchAlg, dict[str, Any]]: ...


class SchedulerBuilder(Protocol):
    """``--scheduler NAME``: the scheduler, recording each stop's reason in ``stop_reasons`` (shared with the
    Parquet sink); ``space`` gives the population schedulers their mutable parameters."""

    def __call__(self, options: Any, max_epochs: int, stop_reasons: dict[str, str],
                 space: SearchSpace | None = None) -> GuardedScheduler: ...
