"""Seed a new Optuna search with an old sweep's finished trials (``xbm-tune sweep ... --warm-start OLD``).

Contract with ``tune/driver/plan.py``::

    from tune.search.warm_start import WarmStartError, warm_start_points      # WarmStartError(ValueError)
    warm = warm_start_points(old_sweep_path, space, metric, mode)
    warm.points    # list of {param: value}: the new space's params that exist for that trial
    warm.rewards   # the old trial's final_<metric>, one per point
    warm.rejected  # list of (config, reason): every old trial not used, with why
    warm.summary() # "4 trial(s) of OLD kept, 16 rejected" and one line per kind of rejection

Reads ``<old>/results/trials.parquet`` (the Parquet contract, docs/ARCHITECTURE.md) with pyarrow, no
Ray. A row is kept when all of these hold, else it is rejected with the first reason that fails:

* ``stage`` is ``sweep`` (confirm rows repeat configs with other seeds) and ``status`` is ``completed``:
  a ``stopped_early`` trial's value is a partial-budget value, the bias the sweep keeps out of TPE by
  telling such trials PRUNED; ``failed`` and ``running`` ones have no result;
* the reward ``final_<metric>`` (the value the sweep tells Optuna at the budget's end) is finite;
* every key the new space fixes (base and TrainConfig defaults) has the same value in the old trial
  (a null there means its default), except keys that do not change what is learnt: ``IGNORED``;
* every param of the new space that exists under its ``when`` (evaluated on the old trial's values) is
  present and inside the branch's bounds or choices; one that does not exist must be null or at its
  default in the old trial (the new space would run it at the default).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from tune.results.parquet import RESULTS, config_of, finite
from tune.search.spaces import SearchSpace
from tune.search.spaces.validation import DEFAULTS

#: keys that say where or how a run executes, not what it learns
IGNORED = frozenset({"seed", "device", "num_workers", "data_root", "image_cache", "pretrained_path", "evaluate_test"})
KEPT_STATUS = "completed"


class WarmStartError(ValueError):
    """The old sweep cannot seed this one at all (no trials table, no reward column): exit 2."""


@dataclass
class WarmStart:
    points: list[dict[str, Any]] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    rejected: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    source: str = ""

    def summary(self) -> str:
        head = f"{len(self.points)} trial(s) of {self.source} kept, {len(self.rejected)} rejected"
        reasons: dict[str, int] = {}
        for _, reason in self.rejected:
            kind = reason.split(":")[0]
            reasons[kind] = reasons.get(kind, 0) + 1
        return head + "".join(f"\n  {n} x {kind}" for kind, n in sorted(reasons.items(), key=lambda kv: -kv[1]))


def warm_start_points(old_sweep_path: str, space: SearchSpace, metric: str, mode: str,
                      value: str = "final") -> WarmStart:
    """Old finished trials that fit ``space``, with their rewards; best first (by ``mode``)."""
    if mode not in ("max", "min"):
        raise WarmStartError(f"mode must be one of ['max', 'min'], but got {mode!r}")
    rows = read_trials(old_sweep_path)
    column = f"{value}_{metric}"
    if rows and column not in rows[0]:
        have = sorted(k for k in rows[0] if k.startswith(("best_", "final_")))
        raise WarmStartError(f"the old sweep {old_sweep_path} has no column {column!r} to use as reward; "
                             f"it has {have}: warm-start with the metric it recorded (--metric)")
    kept: list[tuple[float, dict]] = []
    out = WarmStart(source=str(old_sweep_path))
    for row in rows:
        config = config_of(row)
        reason = _row_reason(row, column)
        point = None
        if reason is None:
            reason, point = point_in_space(space, config)
        if reason is not None:
            out.rejected.append((config, f"{reason} (trial {row.get('trial_id')})"))
        else:
            kept.append((float(row[column]), point))
    kept.sort(key=lambda rp: -rp[0] if mode == "max" else rp[0])
    out.points = [p for _, p in kept]
    out.rewards = [r for r, _ in kept]
    return out


def read_trials(old_sweep_path: str) -> list[dict[str, Any]]:
    """The old sweep's trials as plain Python rows (nulls as None), from a local folder or a URI."""
    from analysis.location import Folder
    from tune.results.parquet import check_storage

    check_storage(str(old_sweep_path))   # a missing bucket or rejected credentials: their own message
    results = f"{str(old_sweep_path).rstrip('/')}/{RESULTS}"
    try:
        table = Folder(results).read_table("trials.parquet")
    except (OSError, ValueError) as exc:
        raise WarmStartError(f"cannot read {results}/trials.parquet: {exc}") from None
    if table is None:
        raise WarmStartError(f"{old_sweep_path} is not a sweep folder: {results}/trials.parquet is missing")
    return [{k: _plain(v) for k, v in row.items()} for row in table.to_pylist()]


def _row_reason(row: Mapping[str, Any], column: str) -> str | None:
    stage = row.get("stage") or "sweep"
    if stage != "sweep":
        return f"stage {stage}: a seed repeat of a chosen config, not a search point"
    status = row.get("status")
    if status != KEPT_STATUS:
        detail = {"stopped_early": f"stopped by the scheduler after {row.get('epochs_completed')} epoch(s), "
                                   "its value is not a full-budget result",
                  "failed": f"no result ({row.get('error') or row.get('stop_reason') or 'error'})",
                  "running": "did not finish"}.get(status, "not a finished trial")
        return f"status {status}: {detail}"
    reward = row.get(column)
    if not finite(reward):
        return f"no finite {column}: got {reward!r}"
    return None


def point_in_space(space: SearchSpace, config: Mapping[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """(None, point) when the old trial's ``config`` is a point of ``space``, else (reason, None)."""
    for key, new in space.fixed.items():
        if key in space.params or key in IGNORED:
            continue
        old = config.get(key)
        old = DEFAULTS[key] if old is None else old
        if not _same(old, new):
            return f"fixed value differs: {key} = {old!r} in the old trial, {new!r} in the new space", None
    values = dict(space.fixed)
    point: dict[str, Any] = {}
    for key, param in space.params.items():  # dependency order: tested keys are settled first
        old = config.get(key)
        values.pop(key, None)
        branch = param.active(values)
        if branch is None:
            if old is not None and not _same(old, DEFAULTS[key]):
                return (f"absent in the new space: {key} = {old!r} in the old trial, but its condition is off "
                        f"in the new space (which runs the default {DEFAULTS[key]!r})"), None
            continue
        if old is None:
            return f"missing param: {key} is null in the old trial but exists in the new space", None
        if not branch.dist.contains(old):
            return f"outside the new space: {key} = {old!r} is not in {branch.dist.describe()}", None
        point[key] = old
        values[key] = old
    return None, point


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(a, bool) and isinstance(b, bool) and a == b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _plain(value: Any) -> Any:
    """NaN -> None; numpy scalars -> Python."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
