"""The five distributions a search-space parameter may draw from, and their registry.

YAML spelling (``params: {key: {<name>: <args>}}``) and what each searcher does with it:

=============  ==================  ==========================  ==============================  ================
name           args                Optuna (define-by-run)      Ray BasicVariantGenerator       values probed
=============  ==================  ==========================  ==============================  ================
``uniform``    ``[lo, hi]``        ``suggest_float(lo, hi)``   ``ray_tune.uniform(lo, hi)``        lo, hi
``loguniform`` ``[lo, hi]``, lo>0  ``suggest_float(log=True)`` ``ray_tune.loguniform(lo, hi)``     lo, hi
``int``        ``[lo, hi]``        ``suggest_int(lo, hi)``     ``ray_tune.randint(lo, hi + 1)``    lo, hi
``choice``     ``[v1, v2, ...]``   ``suggest_categorical``     ``ray_tune.choice``                 every value
``grid``       ``[v1, v2, ...]``   refused (TPE cannot)        ``ray_tune.grid_search``            every value
=============  ==================  ==========================  ==============================  ================

Bounds are inclusive (``int: [0, 30]`` can give 30) and must satisfy ``lo < hi``. "Values probed"
are the values validation pushes through ``TrainConfig.from_dict`` so that the config's own rules
(``0 <= lambda_mu <= 1``, ``0 < memory.ratio <= 1``, ...) judge the space before any trial starts.

Constructors raise ``ValueError`` stating the rule and the value; the loader adds file and key.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

import numpy as np

if TYPE_CHECKING:  # imported where used: a space loads without Optuna or Ray
    import optuna


def _number(value: Any, what: str) -> float:
    """A bound as a float. PyYAML reads ``1e-4`` (no dot) as a string, so numeric strings are accepted."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number, but got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, but got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{what} must be finite, but got {value!r}")
    return number


def _pair(args: Any, name: str) -> tuple[Any, Any]:
    if not isinstance(args, (list, tuple)) or len(args) != 2:
        raise ValueError(f"{name} takes a list [lo, hi], but got {args!r}")
    return args[0], args[1]


class Distribution(ABC):
    """One parameter's distribution. Subclasses fill the hooks below; nothing here knows a config key."""

    name: ClassVar[str]
    is_grid: ClassVar[bool] = False
    is_discrete: ClassVar[bool] = False  # values() enumerates every value (conditions may test it)

    @abstractmethod
    def __init__(self, args: Any) -> None:
        """From the YAML's args (``[lo, hi]`` or the values); raises ValueError naming the rule and the value."""

    @abstractmethod
    def probe_values(self) -> list[Any]:
        """Values validation builds a TrainConfig with (extremes, or every value)."""

    @abstractmethod
    def contains(self, value: Any) -> bool:
        """Whether ``value`` could have been drawn (used by warm start)."""

    @abstractmethod
    def sample(self, rng: np.random.Generator) -> Any:
        """One draw with a NumPy generator (conditional params under random search)."""

    @abstractmethod
    def suggest(self, trial: optuna.Trial, key: str) -> Any:
        """One draw through an Optuna trial (``trial.suggest_*``)."""

    @abstractmethod
    def to_tune(self) -> Any:
        """The Ray Tune domain (or grid_search dict)."""

    def to_pbt(self) -> Any:
        """PBT's mutation for a ``mutable: true`` param: the Ray domain, which explore resamples from or
        multiplies the current value by 0.8 / 1.2 (``tune.search.pbt`` clips the product into the range)."""
        return self.to_tune()

    @abstractmethod
    def to_optuna(self) -> optuna.distributions.BaseDistribution:
        """The Optuna distribution (to rebuild finished trials for warm start)."""

    @abstractmethod
    def describe(self) -> str:
        """``uniform [0.0, 1.0]``: how ``show-space`` prints it."""

    def values(self) -> list[Any] | None:
        """Every value, for discrete distributions; None otherwise."""
        return None

    def max_value(self) -> Any:
        """The largest value it can produce (fairness check)."""
        return max(self.probe_values())

    def numeric_bounds(self) -> tuple[float, float] | None:
        """``(lo, hi)`` holding every value it can produce, when all are numbers (PB2's
        ``hyperparam_bounds``); None when some value is not a number."""
        values = self.probe_values()
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
            return None
        return min(values), max(values)


class _Range(Distribution):
    """Continuous ``[lo, hi]`` with ``lo < hi``."""

    log: ClassVar[bool] = False

    def __init__(self, args: Any) -> None:
        lo, hi = _pair(args, self.name)
        self.lo = _number(lo, f"{self.name} lower bound")
        self.hi = _number(hi, f"{self.name} upper bound")
        if not self.lo < self.hi:
            raise ValueError(f"{self.name} needs lo < hi, but got [{lo!r}, {hi!r}]")
        if self.log and self.lo <= 0.0:
            raise ValueError(f"loguniform needs lo > 0, but got lo={lo!r} (use uniform to include 0)")

    def probe_values(self) -> list[Any]:
        return [self.lo, self.hi]

    def contains(self, value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and self.lo <= value <= self.hi

    def suggest(self, trial: optuna.Trial, key: str) -> float:
        return trial.suggest_float(key, self.lo, self.hi, log=self.log)

    def to_optuna(self) -> optuna.distributions.BaseDistribution:
        import optuna

        return optuna.distributions.FloatDistribution(self.lo, self.hi, log=self.log)

    def describe(self) -> str:
        return f"{self.name} [{self.lo:g}, {self.hi:g}]"


class Uniform(_Range):
    name = "uniform"

    def sample(self, rng: np.random.Generator) -> float:
        return float(rng.uniform(self.lo, self.hi))

    def to_tune(self) -> Any:
        from ray import tune as ray_tune

        return ray_tune.uniform(self.lo, self.hi)


class LogUniform(_Range):
    name = "loguniform"
    log = True

    def sample(self, rng: np.random.Generator) -> float:
        return float(math.exp(rng.uniform(math.log(self.lo), math.log(self.hi))))

    def to_tune(self) -> Any:
        from ray import tune as ray_tune

        return ray_tune.loguniform(self.lo, self.hi)


class IntRange(Distribution):
    """Integers ``lo..hi``, both inclusive."""

    name = "int"

    def __init__(self, args: Any) -> None:
        lo, hi = _pair(args, self.name)
        for what, bound in (("lower", lo), ("upper", hi)):
            if isinstance(bound, bool) or not float(_number(bound, f"int {what} bound")).is_integer():
                raise ValueError(f"int {what} bound must be an integer, but got {bound!r}")
        self.lo, self.hi = int(float(lo)), int(float(hi))
        if not self.lo < self.hi:
            raise ValueError(f"int needs lo < hi, but got [{lo!r}, {hi!r}]")

    def probe_values(self) -> list[Any]:
        return [self.lo, self.hi]

    def contains(self, value: Any) -> bool:
        ok_type = isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer()
        return ok_type and self.lo <= value <= self.hi

    def sample(self, rng: np.random.Generator) -> int:
        return int(rng.integers(self.lo, self.hi + 1))

    def suggest(self, trial: optuna.Trial, key: str) -> int:
        return trial.suggest_int(key, self.lo, self.hi)

    def to_tune(self) -> Any:
        from ray import tune as ray_tune

        return ray_tune.randint(self.lo, self.hi + 1)  # Ray's upper bound is exclusive

    def to_optuna(self) -> optuna.distributions.BaseDistribution:
        import optuna

        return optuna.distributions.IntDistribution(self.lo, self.hi)

    def describe(self) -> str:
        return f"int [{self.lo}, {self.hi}]"


class Choice(Distribution):
    """A categorical draw among distinct scalar values."""

    name = "choice"
    is_discrete = True

    def __init__(self, args: Any) -> None:
        if not isinstance(args, (list, tuple)) or not args:
            raise ValueError(f"{self.name} takes a non-empty list of values, but got {args!r}")
        for value in args:
            if not isinstance(value, (str, int, float, bool)):
                raise ValueError(f"{self.name} values must be scalars (str, number, bool), but got {value!r}")
        seen = [(type(v), v) for v in args]
        duplicated = [v for i, (t, v) in enumerate(seen) if (t, v) in seen[:i]]
        if duplicated:
            raise ValueError(f"{self.name} values must be distinct, but {duplicated[0]!r} repeats in {list(args)!r}")
        self.options: tuple[Any, ...] = tuple(args)

    def with_values(self, values: Sequence[Any]) -> "Choice":
        """The same distribution over ``values`` (the loader coerces them to the key's type)."""
        return type(self)(list(values))

    def values(self) -> list[Any]:
        return list(self.options)

    def probe_values(self) -> list[Any]:
        return list(self.options)

    def contains(self, value: Any) -> bool:
        return any(type(value) is type(o) and value == o or _same_number(value, o) for o in self.options)

    def sample(self, rng: np.random.Generator) -> Any:
        return self.options[int(rng.integers(len(self.options)))]

    def suggest(self, trial: optuna.Trial, key: str) -> Any:
        return trial.suggest_categorical(key, list(self.options))

    def to_tune(self) -> Any:
        from ray import tune as ray_tune

        return ray_tune.choice(list(self.options))

    def to_pbt(self) -> list[Any]:
        """A list, which PBT's explore resamples from or moves along by one value: a Ray domain would be
        multiplied by 0.8 / 1.2 like a range (a margin of 0.1 explored to 0.12, a value the space never
        lists). Numbers in increasing order, so that a move reaches the next larger or smaller value."""
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.options)
        return sorted(self.options) if numbers else list(self.options)

    def to_optuna(self) -> optuna.distributions.BaseDistribution:
        import optuna

        return optuna.distributions.CategoricalDistribution(list(self.options))

    def describe(self) -> str:
        return f"{self.name} {list(self.options)}"


class Grid(Choice):
    """Every value, each in its own trial (Ray's grid_search); cannot be sampled by Optuna's TPE."""

    name = "grid"
    is_grid = True

    def suggest(self, trial: optuna.Trial, key: str) -> Any:
        raise TypeError(f"grid parameter {key!r} cannot be suggested by Optuna (check_search refuses this)")

    def to_tune(self) -> Any:
        from ray import tune as ray_tune

        return ray_tune.grid_search(list(self.options))


def _same_number(a: Any, b: Any) -> bool:
    numbers = (int, float)
    if isinstance(a, bool) or isinstance(b, bool) or not (isinstance(a, numbers) and isinstance(b, numbers)):
        return False
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


DISTRIBUTIONS: dict[str, type[Distribution]] = {
    cls.name: cls for cls in (Uniform, LogUniform, IntRange, Choice, Grid)
}


def build_distribution(name: str, args: Any) -> Distribution:
    """``build_distribution("uniform", [0, 1])``; an unknown name raises listing the valid ones."""
    if name not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {name!r}; valid: {', '.join(DISTRIBUTIONS)}")
    return DISTRIBUTIONS[name](args)
