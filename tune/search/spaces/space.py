"""``SearchSpace``: a validated space and its conversion for the three searchers.

Which searcher takes which distributions (``check_search`` enforces it before Ray starts):

* ``optuna``: ``uniform``, ``loguniform``, ``int``, ``choice``, conditions. No ``grid`` (TPE samples,
  it cannot enumerate): use ``choice``. Runs through ``define_by_run``.
* ``random``: everything; Ray's BasicVariantGenerator runs every grid point ``num_samples`` times,
  drawing the other params afresh each time. Runs through ``to_param_space``.
* ``grid``: ``grid`` params only (``is_grid``); the trial count is ``grid_size() * num_samples``. A grid param
  with ``when`` exists only at the points where its condition holds (``grid_points``); such a space runs its
  points as fixed configs (``tune.search.searchers``), each ``num_samples`` times.

Conditional params under ``random``: ``to_param_space`` gives each a ``ray_tune.sample_from`` that reads
the keys its condition tests and returns a draw, or ``None`` when the condition is off. ``None``
means absent: the trainable drops ``None`` values (``drop_absent``) before ``TrainConfig.from_dict``,
and the Parquet sink writes them as null. Under ``optuna`` absent params are simply never suggested.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from tune.search.spaces.combinations import combination_warning, grid_points
from tune.search.spaces.errors import SpaceError
from tune.search.spaces.param import Param
from tune.search.spaces.schema import header_comments
from tune.search.spaces.validation import DEFAULTS

if TYPE_CHECKING:  # imported where used: a space loads without Optuna
    import optuna

#: the searchers that sample through an Optuna study (define-by-run); ``optuna`` and ``tpe`` are TPE
OPTUNA_SEARCHES = ("optuna", "tpe", "gp", "cmaes", "nsga2")
SEARCHES = (*OPTUNA_SEARCHES, "random", "grid")


def drop_absent(config: Mapping[str, Any]) -> dict[str, Any]:
    """The trial's config without absent (``None``) params: what ``TrainConfig.from_dict`` takes."""
    return {key: value for key, value in config.items() if value is not None}


class SearchSpace:
    """A validated search space. Build with ``load_space``; attributes are read-only by convention."""

    def __init__(self, name: str, description: str, path: Path | None, text: str, base: dict[str, Any],
                 params: dict[str, Param], overrides: Mapping[str, Any] | None = None,
                 smoke: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.description = description
        self.path = path
        self.text = text
        self.base = base  # dotted key -> coerced fixed value
        self.params = params  # dotted key -> Param, in dependency order
        self.overrides = dict(overrides or {})
        self.smoke = dict(smoke or {})  # the file's ``smoke:`` section (key -> scalar or grid Param), as declared

    @property
    def source(self) -> str:
        return str(self.path) if self.path else self.name

    @property
    def fixed(self) -> dict[str, Any]:
        """The value of every key the space does not sweep: TrainConfig defaults updated with base.
        Param keys are left out: an absent param is absent, not at its default, for conditions."""
        return {k: v for k, v in {**DEFAULTS, **self.base}.items() if k not in self.params}

    @property
    def is_grid(self) -> bool:
        """True when every param is a grid (vacuously true without params)."""
        return all(p.is_grid for p in self.params.values())

    def check_search(self, search: str) -> None:
        """Refuse a searcher that cannot run this space (module docstring)."""
        if search not in SEARCHES:
            raise SpaceError(self.source, None, f"unknown search {search!r}; valid: {', '.join(SEARCHES)}")
        grids = [k for k, p in self.params.items() if p.is_grid]
        others = [k for k, p in self.params.items() if not p.is_grid]
        if search in OPTUNA_SEARCHES and grids:
            raise SpaceError(self.source, grids[0], f"search {search!r} cannot run grid params (Optuna samples, it "
                             f"does not enumerate); grid params: {grids}. Use --search grid (all grid) or "
                             "random (grid x random draws), or write the values as choice")
        conditional = [k for k in grids if self.params[k].is_conditional]
        if search == "random" and conditional:
            raise SpaceError(self.source, conditional[0], f"a grid param with 'when' is enumerated by --search grid "
                             f"only (its points where the condition holds); random search would draw it. Use "
                             f"--search grid, or write it as choice")
        if search == "grid" and others:
            raise SpaceError(self.source, others[0], f"search 'grid' needs every param to be a grid, but "
                             f"{others[0]} is {self.params[others[0]].describe()}. Use --search random "
                             "(each grid point with random draws of the others) or optuna")

    def grid_size(self) -> int:
        """Number of grid points (1 without grid params); each runs ``num_samples`` times. An all-grid space
        counts its points where each conditional param exists (``grid_points``)."""
        if self.params and self.is_grid:
            return len(self.grid_points())
        return math.prod(len(p.branches[0].dist.values() or ()) for p in self.params.values() if p.is_grid)

    def grid_points(self) -> list[dict[str, Any]]:
        """Every point of an all-grid space (``combinations.grid_points``: a conditional param only where its
        condition holds, None where it is absent), what ``--search grid`` runs."""
        return grid_points(self.params, self.fixed)

    @property
    def conditional_grid(self) -> bool:
        """An all-grid space with a conditional param: ``--search grid`` runs its ``grid_points`` as fixed
        configs, as Ray's grid_search enumerates the full product of independent values only."""
        return bool(self.params) and self.is_grid and any(p.is_conditional for p in self.params.values())

    # ---- Ray BasicVariantGenerator (search "random" / "grid") --------------------------------
    def to_param_space(self, seed: int | None = None) -> dict[str, Any]:
        """Tuner ``param_space``: base constants, Ray domains, and ``sample_from`` for conditional
        params (drawn with a NumPy generator seeded by ``seed``; ``None`` when absent)."""
        rng = np.random.default_rng(seed)
        out: dict[str, Any] = dict(self.base)
        for key, param in self.params.items():
            if param.is_conditional:
                from ray import tune as ray_tune

                out[key] = ray_tune.sample_from(_conditional_sampler(param, self.fixed, rng))
            else:
                out[key] = param.branches[0].dist.to_tune()
        return out

    @property
    def mutable(self) -> tuple[str, ...]:
        """The params marked ``mutable: true``: population-based training perturbs them during a run."""
        return tuple(key for key, param in self.params.items() if param.mutable)

    def mutations(self) -> dict[str, Any]:
        """PBT's ``hyperparam_mutations``: each mutable param's ``to_pbt()``, a range's Ray domain (explore
        resamples from it or multiplies the value by 0.8 / 1.2, clipped into it by ``tune.search.pbt``) or a
        choice's list (explore resamples from it or moves to a neighbouring value)."""
        return {key: self.params[key].branches[0].dist.to_pbt() for key in self.mutable}

    # ---- Optuna define-by-run (search "optuna") ------------------------------------------------
    def define_by_run(self, trial: optuna.Trial, grid_as_choice: bool = False) -> dict[str, Any] | None:
        """``OptunaSearch(space=space.define_by_run, ...)``: suggests, in dependency order, every param
        whose condition holds on what is known so far; returns the constant base (Ray merges it).
        ``grid_as_choice``: a grid param as a categorical over its values, for a study of trials that ran (a
        live search cannot enumerate a grid, and ``check_search`` refuses it)."""
        values = self.fixed
        for key, param in self.params.items():
            branch = param.active(values)
            if branch is None:
                continue
            dist = branch.dist
            values[key] = (trial.suggest_categorical(key, dist.values() or []) if grid_as_choice and dist.is_grid
                           else dist.suggest(trial, key))
        return dict(self.base) or None

    # ---- a trial's config ---------------------------------------------------------------------
    def resolve(self, sampled: Mapping[str, Any]) -> dict[str, Any]:
        """Base + sampled, minus params that do not exist under their condition (and ``None`` values)."""
        config = {**self.base, **drop_absent(sampled)}
        values = {**self.fixed, **config}
        for key, param in self.params.items():
            if key in config and param.active(values) is None:
                del config[key]
                del values[key]
        return config

    def fairness_warnings(self, grace_period: int, scheduler: str) -> list[str]:
        from tune.search.spaces.fairness import fairness_warnings

        return fairness_warnings(self, grace_period, scheduler)

    def combination_warning(self) -> str | None:
        """Whether some combinations of the swept keys' values break a cross rule (``combinations``)."""
        return combination_warning(self.base, self.params)

    def describe(self) -> str:
        """What ``xbm-tune show-space`` prints: the resolved, validated space."""
        lines = [f"space: {self.name}", f"file: {self.source}", f"description: {self.description or '-'}"]
        header = header_comments(self.text)
        if header:
            lines += ["header (the file's opening comments: source, the paper's numbers, protocol):"]
            lines += [f"  {line}" for line in header]
        if self.overrides:
            lines.append("overrides (--set): " + ", ".join(f"{k}={v!r}" for k, v in self.overrides.items()))
        lines.append("base (fixed; other keys keep their TrainConfig default):")
        lines += [f"  {k} = {v!r}" for k, v in self.base.items()] or ["  (none)"]
        lines.append("params (in dependency order):")
        width = max((len(k) for k in self.params), default=0)
        lines += [f"  {k:<{width}}  {p.describe()}" for k, p in self.params.items()] or ["  (none)"]
        if self.smoke:
            lines.append("smoke (what --smoke-test runs instead): " + ", ".join(
                f"{k}={v.describe() if isinstance(v, Param) else repr(v)}" for k, v in self.smoke.items()))
        runnable = [s for s in SEARCHES if _accepts(self, s)]
        lines.append(f"searches: {', '.join(runnable)}; grid points: {self.grid_size()}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"SearchSpace({self.name!r}, params={list(self.params)})"


def _accepts(space: SearchSpace, search: str) -> bool:
    try:
        space.check_search(search)
    except SpaceError:
        return False
    return True


def _conditional_sampler(param: Param, fixed: Mapping[str, Any], rng: np.random.Generator) -> Callable[[Any], Any]:
    """A one-argument function for ``ray_tune.sample_from``. Ray passes the trial spec, guarded so that
    reading a not-yet-resolved key raises and Ray retries after resolving it; keys missing from the
    param space have their fixed value. A plain function (not a callable object) so that Ray's deep
    copies of the spec share the generator instead of replaying one stream per trial."""

    def sample(spec: Any) -> Any:
        values = {}
        for key in param.condition_keys():
            try:
                values[key] = getattr(spec.config, key)
            except AttributeError:
                values[key] = fixed.get(key)
        branch = param.active(values)
        return None if branch is None else branch.dist.sample(rng)

    return sample
