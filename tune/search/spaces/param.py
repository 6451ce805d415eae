"""A swept parameter: one or more (distribution, condition) branches.

``params: {normaliser.kalman_r: {loguniform: [1.0e-4, 10.0], when: {normaliser.kind: axbn}}}`` is one
branch; a list of branches with mutually exclusive conditions gives one key a different range per
condition (``miner.pos_margin`` is a distance for ``lp`` and a similarity for ``cosine``)::

    miner.pos_margin:
      - {uniform: [0.0, 0.6], when: {miner.distance: [lp, lp_raw]}}
      - {uniform: [0.5, 1.0], when: {miner.distance: cosine}}

A parameter exists in a trial when one branch's ``when`` holds: every named key is present in the
trial and has one of the listed values (several keys: all must hold). A key not in ``base`` nor in
``params`` has its TrainConfig default.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from tune.search.spaces.distributions import Distribution

NOT_IN_TRIAL = object()  # a key that does not exist in a trial (a conditional param whose condition is off)


@dataclass(frozen=True)
class Branch:
    dist: Distribution
    when: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # key -> allowed values; empty: always

    def holds(self, values: Mapping[str, Any]) -> bool:
        """Whether the condition holds on ``values`` (a key missing from ``values`` fails it)."""
        return all(member(values.get(key, NOT_IN_TRIAL), allowed) for key, allowed in self.when.items())

    def describe(self) -> str:
        if not self.when:
            return self.dist.describe()
        cond = ", ".join(f"{k} in {list(v)}" if len(v) > 1 else f"{k} == {v[0]!r}" for k, v in self.when.items())
        return f"{self.dist.describe()}  when {cond}"


@dataclass(frozen=True)
class Param:
    """A swept key. ``kind``, ``args`` and ``when`` describe the first branch (the only one, usually)."""

    key: str
    branches: tuple[Branch, ...]
    mutable: bool = False  # population-based training may change it during a run (``mutable: true``)

    @property
    def kind(self) -> str:
        return self.branches[0].dist.name

    @property
    def args(self) -> Any:
        dist = self.branches[0].dist
        return dist.values() if dist.is_discrete else dist.probe_values()  # a range's: [lo, hi]

    @property
    def when(self) -> Mapping[str, tuple[Any, ...]]:
        return self.branches[0].when

    @property
    def is_grid(self) -> bool:
        return self.branches[0].dist.is_grid

    @property
    def is_conditional(self) -> bool:
        return any(b.when for b in self.branches)

    def condition_keys(self) -> set[str]:
        return {key for b in self.branches for key in b.when}

    def active(self, values: Mapping[str, Any]) -> Branch | None:
        """The branch whose condition holds on ``values``, or None when the param does not exist."""
        for branch in self.branches:
            if branch.holds(values):
                return branch
        return None

    def possible_values(self) -> list[Any] | None:
        """Every value any branch can give (discrete params only), else None."""
        if not all(b.dist.is_discrete for b in self.branches):
            return None
        out: list[Any] = []
        for b in self.branches:
            out += [v for v in b.dist.values() or () if v not in out]
        return out

    def describe(self) -> str:
        return "; ".join(b.describe() for b in self.branches)


def member(value: Any, allowed: tuple[Any, ...]) -> bool:
    """Whether ``value`` is one of ``allowed`` (1 == 1.0, but True != 1); an absent value never is."""
    if value is NOT_IN_TRIAL or value is None:
        return False
    return any(type(value) is type(a) and value == a or _num_eq(value, a) for a in allowed)


def _num_eq(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b
