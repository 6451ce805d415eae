"""Searchers registry (``--search``): ``optuna`` / ``tpe`` (seeded TPE, define-by-run), ``gp`` (Optuna's
``GPSampler``: Gaussian process, log EI), ``cmaes`` (Optuna's ``CmaEsSampler``, the ``cmaes`` package),
``nsga2`` (Optuna's ``NSGAIISampler``, several objectives), ``random``, ``grid``.

``gp`` and ``cmaes`` suit small continuous spaces (``pcxbn_lambdas``, ``axbn_kalman``) where a few
expensive trials favour a model of the whole surface. Both model the space's continuous parameters
(CMA-ES: the intersection of every trial's parameters); categorical and conditional ones are drawn by
Optuna's independent sampler (random, seeded). Both learn from completed trials only: a trial the
scheduler stopped (told ``PRUNED``, below) does not enter their model.

Several objectives (``--metric`` repeated): the study gets one direction per metric and each finished
trial is told the values of its last epoch; ``tpe`` (MOTPE), ``gp`` and ``nsga2`` optimise them jointly
(``cmaes`` cannot: refused). Optuna keeps no intermediate values for several objectives, so a stopped trial
is told ``PRUNED`` without them. ``gpu_hours`` is not an epoch metric: it is the trial's Tune time
(``time_total_s``) x its GPUs / 3600, as the Parquet sink computes it.

Early-stopped trials and TPE
----------------------------
Ray 2.60's ``OptunaSearch.on_trial_complete`` tells Optuna ``COMPLETE`` with the trial's last value
for every trial that ends without error, including those ASHA stopped at an early rung. TPE then models
an epoch-1 Recall@1 as if it were a final one: configurations that start fast look as good as ones that
finish well, and those that were culled early look like genuine (poor) finals, so TPE is biased toward
fast starters. ``PrunedOptunaSearch`` instead tells Optuna ``PRUNED`` when a trial ended before the epoch
budget (its last epoch < ``max_epochs``), after reporting the stopping rung's value as an intermediate
value at step = epoch. Optuna's TPE (``optuna.samplers.TPESampler``, ``_split_trials``) ranks pruned
trials below every completed one, ordered by how far they got and then by their last intermediate
value, so early values never enter the model as finals, and a trial that survived more rungs still
counts as better than one culled earlier. Non-finite losses and errors are told ``FAIL`` (TPE ignores them).

Warm start: Ray refuses ``evaluated_rewards`` with a define-by-run space. Here each old point is
enqueued, asked (so the define-by-run function records the distributions of the branch the point
lies in) and told its reward, which is how Optuna itself adds evaluated trials.
"""
from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import optuna
from optuna.trial import TrialState
from ray.tune.search import BasicVariantGenerator, Searcher
from ray.tune.search.optuna import OptunaSearch

from tune.errors import SweepInputError
from tune.results.keys import ERROR_KEY
from tune.results.parquet import finite
from tune.results.trial_config import gpu_hours
from tune.search.interfaces import SearchAlg, SearcherBuilder
from tune.search.optuna_study import RAY_TRIAL_ID, name_objective
from tune.search.spaces.space import OPTUNA_SEARCHES, SearchSpace

if TYPE_CHECKING:
    from tune.search.warm_start import WarmStart


class PrunedOptunaSearch(OptunaSearch):
    """OptunaSearch that reports trials stopped before ``budget`` epochs as ``PRUNED`` (see module doc)."""

    def __init__(self, space: Callable, metric: str | list[str], mode: str | list[str], seed: int, budget: int,
                 time_attr: str = "epoch", points: list[dict] | None = None,
                 rewards: list[float] | None = None, study_name: str | None = None, storage=None,
                 sampler: str = "tpe", gpus: float = 0.0) -> None:
        self._budget = int(budget)
        self._gpus = float(gpus)  # per trial: a trial's gpu_hours objective
        self._time_attr = time_attr
        self._steps: dict[str, set[int]] = {}
        sampler = OPTUNA_SAMPLERS[sampler](seed)
        super().__init__(space=space, metric=metric, mode=mode, sampler=sampler,
                         points_to_evaluate=points or None, evaluated_rewards=rewards or None,
                         study_name=study_name, storage=storage)

    def _setup_study(self, mode) -> None:
        super()._setup_study(mode)
        name_objective(self._ot_study, self._metric)

    def keep_study(self, name: str, storage) -> None:
        """Move the study (warm-start trials included) into ``storage`` under ``name`` and go on there.

        The searcher is built, and its warm-start points told, while the sweep is planned, before its
        folder may be written (``tune.driver.plan.prepare``); its live journal is created once the folder exists
        (``tune.driver.sweep.start``), before the first trial is suggested."""
        optuna.copy_study(from_study_name=self._study_name, from_storage=self._storage, to_storage=storage,
                          to_study_name=name)
        self._storage, self._study_name = storage, name
        self._ot_study = optuna.load_study(study_name=name, storage=storage, sampler=self._ot_study.sampler,
                                           pruner=self._ot_study.pruner)
        name_objective(self._ot_study, self._metric)

    def suggest(self, trial_id: str) -> dict | str | None:
        config = super().suggest(trial_id)
        if trial_id in self._ot_trials and isinstance(config, dict):
            # optuna-dashboard shows user attributes: Ray's trial id ties a study trial to the Parquet row
            self._ot_trials[trial_id].set_user_attr(RAY_TRIAL_ID, trial_id)
        return config

    @property
    def _several(self) -> bool:
        return isinstance(self._metric, (list, tuple))

    def _objectives(self, result: Mapping[str, Any]) -> list[Any]:
        """The result's value of each objective (``gpu_hours`` from Tune's time when not reported)."""
        names = list(self._metric) if self._several else [self._metric]
        values = []
        for name in names:
            value = result.get(name)
            if value is None and name == "gpu_hours" and finite(result.get("time_total_s")):
                value = gpu_hours(float(result["time_total_s"]), self._gpus)
            values.append(value)
        return values

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if ERROR_KEY in result or trial_id not in self._ot_trials or self._several:
            return  # Optuna keeps no intermediate values for several objectives
        self._report(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if trial_id in self._completed_trials or trial_id not in self._ot_trials:
            return super().on_trial_complete(trial_id, result, error)
        result = result or {}
        values = self._objectives(result)
        epoch = result.get(self._time_attr)
        ot_trial = self._ot_trials[trial_id]
        if error or ERROR_KEY in result or not all(finite(v) for v in values):
            self._ot_study.tell(ot_trial, None, state=TrialState.FAIL)
        elif epoch is not None and int(epoch) < self._budget:
            # the scheduler's STOP skipped on_trial_result for this last result: record it first
            if not self._several:
                self._report(trial_id, result)
            self._ot_study.tell(ot_trial, None, state=TrialState.PRUNED)
        else:
            if not self._several:
                self._report(trial_id, result)  # the last epoch too, so the study's curve is whole
            told = [float(v) for v in values]
            self._ot_study.tell(ot_trial, told if self._several else told[0], state=TrialState.COMPLETE)
        self._completed_trials.add(trial_id)

    def add_evaluated_point(self, parameters: dict, value: float, error: bool = False, pruned: bool = False,
                            intermediate_values: list[float] | None = None) -> None:
        if not callable(self._space):
            return super().add_evaluated_point(parameters, value, error, pruned, intermediate_values)
        self._ot_study.enqueue_trial(dict(parameters), skip_if_exists=False)
        ot_trial = self._ot_study.ask()
        self._suggest_from_define_by_run_func(self._space, ot_trial)
        ot_trial.set_user_attr("warm_start", True)
        if error or not finite(value):
            self._ot_study.tell(ot_trial, None, state=TrialState.FAIL)
        else:
            self._ot_study.tell(ot_trial, float(value), state=TrialState.PRUNED if pruned else TrialState.COMPLETE)

    def _report(self, trial_id: str, result: Mapping[str, Any]) -> None:
        value, step = result.get(self._metric), result.get(self._time_attr)
        seen = self._steps.setdefault(trial_id, set())
        # a trial retried from its checkpoint re-reports epochs; Optuna keeps the first value per step
        if finite(value) and step is not None and int(step) not in seen:
            self._ot_trials[trial_id].report(float(value), int(step))
            seen.add(int(step))


def _cmaes(seed: int) -> optuna.samplers.BaseSampler:
    try:
        import cmaes  # noqa: F401  (Optuna imports it lazily, at the first relative draw)
    except ImportError:
        raise SweepInputError("--search cmaes needs the cmaes package: pip install '.[cmaes]'") from None
    return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)


#: ``--search`` name -> the Optuna sampler, seeded
OPTUNA_SAMPLERS = {
    "tpe": lambda seed: optuna.samplers.TPESampler(seed=seed),
    "gp": lambda seed: optuna.samplers.GPSampler(seed=seed),
    "cmaes": _cmaes,
    "nsga2": lambda seed: optuna.samplers.NSGAIISampler(seed=seed),
}


class FixedConfigs(Searcher):
    """Suggests the given configs in order, then ``FINISHED``: no search, for the stages that rerun configs and
    for a conditional grid's points. ``total``: how many trials Tune should ask for (its ``num_samples``)."""

    def __init__(self, configs: Sequence[Mapping[str, Any]], metric: str, mode: str) -> None:
        super().__init__(metric=metric, mode=mode)
        self._configs = [dict(c) for c in configs]
        self._next = 0

    @property
    def total(self) -> int:
        return len(self._configs)

    def suggest(self, trial_id: str) -> dict | str:
        if self._next >= len(self._configs):
            return Searcher.FINISHED
        self._next += 1
        return dict(self._configs[self._next - 1])

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        """Nothing to learn: the configs are fixed."""

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as out:
            pickle.dump(self.__dict__, out)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as stream:
            self.__dict__.update(pickle.load(stream))


def _optuna(space: SearchSpace, options: Any, budget: int,
            warm: WarmStart | None) -> tuple[PrunedOptunaSearch, dict[str, Any]]:
    points, rewards = (warm.points, warm.rewards) if warm is not None else (None, None)
    # Offset TPE's seed by the number of warm points: with the old sweep's seed, its first random
    # draws would repeat the old sweep's own start-up points, already evaluated.
    seed = options.seed + len(points or ())
    # an explicit in-memory storage, so that keep_study can copy the study out of it (into the sweep's journal)
    storage = optuna.storages.InMemoryStorage()
    sampler = "tpe" if options.search == "optuna" else options.search
    several = len(options.metrics) > 1
    metric, mode = (list(options.metrics), list(options.modes)) if several else (options.metric, options.mode)
    searcher = PrunedOptunaSearch(space.define_by_run, metric, mode, seed, budget, points=points, rewards=rewards,
                                  storage=storage, sampler=sampler, gpus=options.trial_gpus)
    return searcher, {}


def _variants(space: SearchSpace, options: Any, budget: int,
              warm: WarmStart | None) -> tuple[SearchAlg, dict[str, Any]]:
    """Random and grid search: Ray's variant generator; conditional params draw from ``options.seed`` too. A
    grid with conditional params (``SearchSpace.conditional_grid``) runs its points as fixed configs, each
    ``num_samples`` times (Ray's grid_search would run the full product). No Optuna study:
    ``xbm-tune export-optuna`` builds one from the Parquet."""
    if options.search == "grid" and space.conditional_grid:
        points = space.grid_points() * options.num_samples
        return FixedConfigs(points, options.metric, options.mode), dict(space.base)
    return BasicVariantGenerator(random_state=options.seed), space.to_param_space(seed=options.seed)


#: name -> factory(space, options, budget, warm_start)
#:   -> (search_alg, param_space of swept params)
SEARCHERS: dict[str, SearcherBuilder] = {**{name: _optuna for name in OPTUNA_SEARCHES},
                                         "random": _variants, "grid": _variants}
#: Optuna samplers that optimise one objective only
SINGLE_OBJECTIVE = ("cmaes",)


def check_search_options(options) -> None:
    """A known ``--search``, and ``--warm-start`` only with an Optuna searcher (random and grid have no model)."""
    if options.search not in SEARCHERS:
        raise SweepInputError(f"--search must be one of {sorted(SEARCHERS)}, but got {options.search!r}")
    if options.warm_start and options.search not in OPTUNA_SEARCHES:
        raise SweepInputError(f"--warm-start needs --search optuna (or another Optuna searcher of "
                              f"{list(OPTUNA_SEARCHES)}: a model to seed), but got --search {options.search}: drop "
                              f"--warm-start or use --search optuna")
    several = len(options.metrics) > 1
    if several and options.search in SINGLE_OBJECTIVE:
        raise SweepInputError(f"several --metric need a searcher that optimises them jointly (tpe, gp, nsga2), but "
                              f"got --search {options.search}: use --search tpe or nsga2, or give one --metric")
    if several and options.warm_start:
        raise SweepInputError("--warm-start seeds one objective, but several --metric were given: drop --warm-start "
                              "or give one --metric")


def build_searcher(space: SearchSpace, options: Any, budget: int) -> tuple[SearchAlg, dict[str, Any], WarmStart | None]:
    """The sweep's search algorithm, the Tune param_space of the swept parameters and the warm start: the options
    checked first (an old sweep is read only for a searcher that can use it), then ``--warm-start``'s points
    read from the old sweep (``tune.search.warm_start``), then the registry's builder."""
    check_search_options(options)
    warm = None
    if options.warm_start:
        from tune.search.warm_start import warm_start_points

        warm = warm_start_points(options.warm_start, space, options.metric, options.mode)
    searcher, swept_space = SEARCHERS[options.search](space, options, budget, warm)
    return searcher, swept_space, warm
