"""``results/sweep.json``: what a sweep was asked to do, as one frozen, versioned record.

Written once by ``xbm-tune sweep`` (``tune.results.record.sweep_record``), updated only where the sweep's files
moved (``paths``), read by ``resume``, ``confirm``, ``status``, ``export-optuna`` and ``analysis.load``.

Version 1 (this one) records each swept parameter's distribution, so the record alone says which
parameters are log-scale::

    {"version": 1, "experiment": "quickstart-20261124-051500", "stage": "sweep",
     "metric": "recall_at_1", "mode": "max", "max_epochs": 9,
     "options": {...the CLI options (tune.driver.options.SweepOptions)...},
     "space": {"name", "path", "description", "text" (the YAML), "base",
               "params": {"memory.ratio": {"loguniform": [0.05, 1.0]},
                          "normaliser.kalman_r": {"loguniform": [1e-4, 10.0], "when": {"normaliser.kind": ["axbn"]}},
                          "miner.pos_margin": [{"uniform": [0.0, 0.6], "when": {...}}, {...}]}},
     "paths": {"data_root": "/data/cub"}, "fairness_warnings": [...], "rungs": [1, 3, 9], "created_utc": "...",
     "git_sha": "...", "package_version": "..."}

A parameter's spec is its space YAML's: one branch as a mapping ``{<distribution>: args, "when": {key:
[values]}}``, several branches as a list of them. Records written before versioning (version 0: no
``version`` key) list the parameters' names only (``space.params`` a list); they still load, with
``specs`` empty (``analysis.load`` then reads the distributions from the YAML text).

``rungs``: the epochs ASHA judged trials at (``--rungs``: geometric, placed by the schedule, or listed); null for
another scheduler and in records written before ``--rungs`` existed (their rungs follow from ``options``'
``grace_period`` and ``reduction_factor``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

RECORD_VERSION = 1
_LOG = "loguniform"


@dataclass(frozen=True)
class SpaceRecord:
    """The search space as the sweep resolved it. ``params``: name -> spec (module docstring), in the
    space's dependency order; a version-0 record has each spec None."""

    name: str | None = None
    path: str | None = None
    description: str | None = None
    text: str | None = None
    base: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "SpaceRecord":
        data = data if isinstance(data, Mapping) else {}
        params = data.get("params") or {}
        if not isinstance(params, Mapping):  # version 0: a list of names
            params = {str(name): None for name in params}
        return cls(name=data.get("name"), path=data.get("path"), description=data.get("description"),
                   text=data.get("text"), base=dict(data.get("base") or {}), params=dict(params))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "description": self.description, "text": self.text,
                "base": dict(self.base), "params": dict(self.params)}



class Objectives:
    """The sweep's objectives, in order (``metric``/``mode`` first, then ``extra_metrics``/``extra_modes``):
    shared by the record and the CLI's ``tune.driver.options.SweepOptions``."""

    # the dataclasses that take this in give the fields (a plain class's annotations make none of theirs)
    metric: str
    mode: str
    extra_metrics: tuple[str, ...]
    extra_modes: tuple[str, ...]

    @property
    def metrics(self) -> tuple[str, ...]:
        return (self.metric, *self.extra_metrics)

    @property
    def modes(self) -> tuple[str, ...]:
        return (self.mode, *self.extra_modes)


@dataclass(frozen=True)
class SweepRecord(Objectives):
    """``sweep.json``. ``metric``/``mode`` are the sweep's first objective (what ASHA stops on; old readers
    know only it), ``extra_metrics``/``extra_modes`` its others (``--metric`` repeated); ``metrics``/``modes``
    give them all as tuples; ``options`` are the CLI's (``SweepOptions.to_dict``);
    ``extra`` keeps keys this version does not know, so that rewriting a newer record loses nothing."""

    experiment: str | None = None
    stage: str = "sweep"
    metric: str = "recall_at_1"
    mode: str = "max"
    extra_metrics: tuple[str, ...] = ()
    extra_modes: tuple[str, ...] = ()
    max_epochs: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    space: SpaceRecord = field(default_factory=SpaceRecord)
    paths: Mapping[str, Any] = field(default_factory=dict)
    fairness_warnings: tuple[str, ...] = ()
    rungs: tuple[int, ...] | None = None
    created_utc: str | None = None
    git_sha: str | None = None
    package_version: str | None = None
    version: int = RECORD_VERSION
    extra: Mapping[str, Any] = field(default_factory=dict)

    # ---- reading ------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SweepRecord":
        """A record from ``sweep.json``'s mapping, any version (a missing key takes its default)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"sweep.json must hold a JSON object, but holds a {type(data).__name__}")
        known = {f.name for f in fields(cls)} - {"extra", "space", "version"}
        values = {k: data[k] for k in known if data.get(k) is not None}
        for key in ("fairness_warnings", "extra_metrics", "extra_modes", "rungs"):
            if key in values:
                values[key] = tuple(values[key])
        for key in ("options", "paths"):
            values[key] = dict(values.get(key) or {})
        extra = {k: v for k, v in data.items() if k not in known | {"space", "version"}}
        return cls(**values, space=SpaceRecord.from_dict(data.get("space")), version=int(data.get("version") or 0),
                   extra=extra)

    @classmethod
    def from_json(cls, text: str | bytes) -> "SweepRecord":
        return cls.from_dict(json.loads(text))

    def to_dict(self) -> dict[str, Any]:
        """What ``sweep.json`` holds (always written at ``RECORD_VERSION``'s layout)."""
        out = {**dict(self.extra), "version": RECORD_VERSION}
        for f in fields(self):
            if f.name not in ("extra", "version"):
                out[f.name] = getattr(self, f.name)
        out.update(space=self.space.to_dict(), options=dict(self.options), paths=dict(self.paths),
                   fairness_warnings=list(self.fairness_warnings), extra_metrics=list(self.extra_metrics),
                   extra_modes=list(self.extra_modes), rungs=None if self.rungs is None else list(self.rungs))
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str)

    def replace(self, **changes: Any) -> "SweepRecord":
        return replace(self, **changes)

    # ---- what readers ask -----------------------------------------------------------------------
    @property
    def swept(self) -> tuple[str, ...]:
        """The swept parameters' names, in the space's order."""
        return tuple(self.space.params)


    @property
    def provenance(self) -> dict[str, Any]:
        return {"git_sha": self.git_sha, "package_version": self.package_version}

    def option(self, key: str, default: Any = None) -> Any:
        """A CLI option as recorded (``options``), else ``default``."""
        value = self.options.get(key)
        return default if value is None else value

    @property
    def has_specs(self) -> bool:
        """Whether the record carries the parameters' distributions (version >= 1)."""
        return self.version >= 1 and all(spec is not None for spec in self.space.params.values())

    def specs(self) -> dict[str, Any]:
        """name -> spec (a mapping, or a list of branch mappings); empty for a version-0 record."""
        return dict(self.space.params) if self.has_specs else {}

    def log_scale(self) -> dict[str, bool]:
        """name -> whether the parameter is drawn log-uniformly (every branch ``loguniform``); empty
        for a version-0 record."""
        return {name: all(_LOG in branch for branch in _branches(spec)) for name, spec in self.specs().items()}


def _branches(spec: Any) -> list[Mapping[str, Any]]:
    branches = spec if isinstance(spec, list) else [spec]
    return [b for b in branches if isinstance(b, Mapping)] or [{}]
