"""A sweep's records: ``results/sweep.json`` (``analysis.contract.SweepRecord``) written and read, the
provenance every row carries, and the outcome of a fit read back from ``trials.parquet``."""
from __future__ import annotations

import functools
import subprocess
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from analysis.contract import TRIALS_FILE, SpaceRecord, SweepRecord
from analysis.location import Folder
from tune.errors import SweepInputError
from tune.results.parquet import RESULTS, SWEEP_JSON, check_storage
from xbm.data.inputs import PATH_KEYS


# ---- sweep.json -----------------------------------------------------------------------------------
def sweep_record(plan) -> SweepRecord:
    """The record of a planned sweep (``tune.driver.plan.SweepPlan``): options, metric, mode, the space with each
    parameter's distribution, where its files are, warnings, ASHA's rungs and provenance."""
    space = plan.space
    return SweepRecord(
        experiment=plan.experiment, stage="sweep", metric=plan.options.metric, mode=plan.options.mode,
        extra_metrics=plan.options.extra_metrics, extra_modes=plan.options.extra_modes, max_epochs=plan.max_epochs, options=plan.options.to_dict(), space=space_record(space),
        paths={k: space.base[k] for k in PATH_KEYS if space.base.get(k) and k not in space.params},
        fairness_warnings=tuple(plan.warnings), created_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        rungs=getattr(plan, "rungs", None),  # ASHA's rung epochs (tune.search.rungs); None for another scheduler
        **provenance())


def space_record(space) -> SpaceRecord:
    """A ``tune.search.spaces.SearchSpace`` as recorded: its YAML text and each parameter's spec (``param_spec``)."""
    return SpaceRecord(name=space.name, path=str(space.path) if space.path else None,
                       description=space.description, text=space.text, base=dict(space.base),
                       params={key: param_spec(param) for key, param in space.params.items()})


def param_spec(param) -> Any:
    """A ``tune.search.spaces.Param`` in its YAML spelling: ``{"loguniform": [lo, hi], "when": {key: [values]}}``
    for one branch, a list of such mappings for several."""
    branches = []
    for branch in param.branches:
        dist = branch.dist
        spec: dict[str, Any] = {dist.name: dist.values() if dist.is_discrete else [dist.lo, dist.hi]}
        if branch.when:
            spec["when"] = {key: list(values) for key, values in branch.when.items()}
        branches.append(spec)
    if param.mutable:
        branches[0]["mutable"] = True
    return branches[0] if len(branches) == 1 else branches


def write_record(results_uri: str, record: SweepRecord) -> None:
    Folder(results_uri).write_json(SWEEP_JSON, record.to_dict())


def read_record(uri: str) -> SweepRecord:
    """The record of the sweep folder ``uri``; SweepInputError (exit 2) naming the file when it is
    missing or unreadable."""
    check_storage(uri)
    storage = Folder(f"{uri.rstrip('/')}/{RESULTS}")
    if not storage.exists(SWEEP_JSON):
        raise SweepInputError(f"{uri!r} is not a sweep folder: {RESULTS}/{SWEEP_JSON} is missing")
    try:
        return SweepRecord.from_dict(storage.read_json(SWEEP_JSON))
    except ValueError as exc:
        raise SweepInputError(f"{storage.display(SWEEP_JSON)}: {exc}") from exc


def record_paths(uri: str, record: SweepRecord, paths: Mapping[str, Any]) -> SweepRecord:
    """Store where the sweep's files are now in ``sweep.json`` (a no-op when they have not moved); the
    record as it now is."""
    if dict(paths) == dict(record.paths):
        return record
    moved = record.replace(paths=dict(paths))
    write_record(f"{uri.rstrip('/')}/{RESULTS}", moved)
    return moved


@functools.cache
def provenance() -> dict[str, Any]:
    """git_sha (None outside a git checkout) and the installed package version."""
    try:
        version = metadata.version("xbm-tune")
    except metadata.PackageNotFoundError:
        version = None
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        sha = None
    return {"git_sha": sha, "package_version": version}


# ---- the outcome of a fit -------------------------------------------------------------------------
@dataclass
class SweepOutcome:
    """What a finished ``fit`` leaves: the results folder and the trials table (pandas); ``interrupted``
    when Ctrl-C stopped the fit before its trials finished (``tune.driver.sweep.fit``)."""

    experiment_uri: str
    results_uri: str
    trials: Any
    metric: str
    mode: str
    swept: tuple = ()
    interrupted: bool = False

    def best(self) -> dict | None:
        column = f"best_{self.metric}"
        frame = self.trials.dropna(subset=[column]) if column in self.trials else self.trials.iloc[:0]
        if frame.empty:
            return None
        index = frame[column].idxmax() if self.mode == "max" else frame[column].idxmin()
        return frame.loc[index].to_dict()

    def counts(self) -> dict[str, int]:
        return self.trials["status"].value_counts().to_dict() if len(self.trials) else {}

    def exit_code(self) -> int:
        """0 when at least one trial completed or was stopped early by design, 1 when every trial failed or
        the fit was interrupted (the sweep is not done: ``xbm-tune resume`` continues it)."""
        if self.interrupted:
            return 1
        counts = self.counts()
        return 0 if counts.get("completed", 0) + counts.get("stopped_early", 0) > 0 else 1


def outcome(experiment_uri: str, metric: str, mode: str) -> SweepOutcome:
    results = f"{experiment_uri.rstrip('/')}/{RESULTS}"
    storage = Folder(results)
    table = storage.read_table(TRIALS_FILE)
    frame = table.to_pandas() if table is not None else _empty_trials()
    record = SweepRecord.from_dict(storage.read_json(SWEEP_JSON)) if storage.exists(SWEEP_JSON) else SweepRecord()
    return SweepOutcome(experiment_uri, results, frame, metric, mode, record.swept)


def _empty_trials():
    import pandas as pd

    return pd.DataFrame({"trial_id": [], "status": []})
