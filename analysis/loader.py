"""Read one or several sweep folders (``<storage>/<name>/`` with ``results/``) into typed DataFrames.

Layout read (docs/ARCHITECTURE.md, "Parquet contract"): ``results/trials.parquet`` (one row per
trial), ``results/epochs/<trial_id>.parquet`` (one row per trial and epoch), ``results/sweep.json``
(metric, mode, ...). Works on a sweep that is still running or crashed: an unreadable file, a missing
trials table, epoch files of trials the table does not know yet are all recorded in
``Sweep.problems`` (and announced with one ``SweepReadWarning``), never skipped silently; trials known
only from their epochs get a row derived from them with ``status = "unknown"``.
"""
from __future__ import annotations

import io
import json
import warnings
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Iterable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from analysis.columns import VARIANT_FLAGS, config_columns, higher_is_better, variant_labels
from analysis import contract
from analysis.contract import (CONFIG_PREFIX, DEFAULT_METRIC, EPOCH_TIME_COLUMNS, INT_COLUMNS, STRING_COLUMNS,
                               TRIALS_FILE, SweepRecord, read_retried)
from analysis.location import Folder

DERIVED_STATUS = "unknown"
_RECORD_FIELDS = frozenset(f.name for f in fields(SweepRecord)) - {"extra", "space", "options"}


class SweepReadWarning(UserWarning):
    """Some of a sweep's files could not be read or were incomplete; see ``Sweep.problems``."""


@dataclass(frozen=True)
class Problem:
    path: str
    what: str
    unreadable: bool = False  # the file exists but could not be read (truncated, foreign)

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


@dataclass
class Sweep:
    """A loaded sweep (or several, concatenated). ``trials`` and ``epochs`` follow the Parquet
    contract plus ``sweep_dir`` and ``variant``; ``options`` is the first folder's ``sweep.json``
    (``metric``, ``mode``, ``max_epochs``, ``options`` (the CLI's), ``space`` (name, text, ...))."""

    trials: pd.DataFrame
    epochs: pd.DataFrame
    problems: list[Problem] = field(default_factory=list)
    options: dict = field(default_factory=dict)
    locations: tuple[Folder, ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(location.uri for location in self.locations)

    @property
    def metric(self) -> str:
        return str(self.option("metric") or DEFAULT_METRIC)

    @property
    def mode(self) -> str:
        return str(self.option("mode") or "max")

    @property
    def name(self) -> str:
        return str(self.option("experiment") or self.option("name") or
                   (self.locations[0].uri.rstrip("/").rsplit("/", 1)[-1] if self.locations else "sweep"))

    def option(self, key: str, default=None):
        """A sweep.json value, read through its ``SweepRecord``: the record's own field (or a key it does not
        know) first, then the CLI options nested under ``options``."""
        record = self.record
        value = getattr(record, key, None) if key in _RECORD_FIELDS else record.extra.get(key)
        return record.option(key, default) if value is None else value

    @cached_property
    def record(self) -> SweepRecord:
        """The first folder's ``sweep.json`` as a ``SweepRecord`` (any version; defaults when missing)."""
        try:
            return SweepRecord.from_dict(self.options)
        except (TypeError, ValueError):  # a foreign sweep.json only costs what the record would tell
            return SweepRecord()

    def declared_params(self) -> dict[str, dict]:
        """``config.<name>`` -> its spec in the space (``{"loguniform": [lo, hi], "when": ...}``), from
        the record (``SweepRecord.specs``; a parameter with several branches is left out); for a record
        written before versioning, from its space's YAML text. Empty when the sweep recorded no space."""
        return self._declared_params

    @cached_property
    def _declared_params(self) -> dict[str, dict]:
        # parsed once: plots and effects ask for every swept column
        specs = self.record.specs() if self.record.has_specs else _yaml_specs(self.record.space.text)
        return {CONFIG_PREFIX + name: spec for name, spec in specs.items() if isinstance(spec, dict)}

    def declared_log_scale(self) -> dict[str, bool]:
        """``config.<name>`` -> whether the space declared it ``loguniform`` (read from the record;
        the YAML text for an old record)."""
        if self.record.has_specs:
            return {CONFIG_PREFIX + name: log for name, log in self.record.log_scale().items()}
        return {name: "loguniform" in spec for name, spec in self.declared_params().items()}

    @property
    def has_confirm(self) -> bool:
        return bool((self.trials.get("stage", pd.Series(dtype="string")) == "confirm").any())

    def higher_is_better(self, metric: str) -> bool:
        return higher_is_better(metric, self.metric, self.mode)

    def stage_trials(self, stage: str | None = "sweep") -> pd.DataFrame:
        return self.trials if stage is None else self.trials[self.trials["stage"] == stage]

    def stage_epochs(self, stage: str | None = "sweep") -> pd.DataFrame:
        return self.epochs if stage is None else self.epochs[self.epochs["stage"] == stage]


def _yaml_specs(text: str | None) -> dict:
    """A version-0 record's parameter specs, from its space's YAML text."""
    if not text:
        return {}
    try:
        import yaml

        return dict((yaml.safe_load(text) or {}).get("params") or {})
    except Exception:  # a space text we cannot parse only costs the declared scales
        return {}


def load(path_or_paths: str | Path | Iterable[str | Path]) -> Sweep:
    """Load sweep folder(s). Each path is a sweep folder or its ``results/`` folder, local or a URI
    ``pyarrow.fs`` understands (``s3://bucket/sweeps/quickstart``)."""
    if isinstance(path_or_paths, (str, Path)):
        path_or_paths = [path_or_paths]
    folders = [Folder.sweep(p) for p in path_or_paths]
    if not folders:
        raise ValueError("analysis.load needs at least one sweep folder, but got an empty list")
    problems: list[Problem] = []
    all_options = [_read_options(folder, problems) for folder in folders]
    options = all_options[0]
    for folder, other in zip(folders[1:], all_options[1:]):
        for key in ("metric", "mode"):
            if other.get(key, options.get(key)) != options.get(key):
                problems.append(Problem(folder.uri, f"sweep.json {key}={other.get(key)!r} differs from the "
                                        f"first sweep's {options.get(key)!r}; analyses use the first"))
    probe = Sweep(pd.DataFrame(), pd.DataFrame(), options=options)
    # the sweep's other objectives (--metric repeated), each summarised under its own mode like the sink does
    extra = dict(zip(probe.record.extra_metrics, probe.record.extra_modes))
    trials, epochs = [], []
    for folder in folders:
        t, e = _read_folder(folder, probe.metric, probe.higher_is_better(probe.metric), problems, extra)
        trials.append(t)
        epochs.append(e)
    trials_df = _settle(pd.concat(trials, ignore_index=True)) if trials else pd.DataFrame()
    epochs_df = _settle(pd.concat(epochs, ignore_index=True)) if epochs else pd.DataFrame()
    flags = tuple(f for f in VARIANT_FLAGS if f in trials_df.columns and trials_df[f].nunique() > 1)
    trials_df["variant"] = variant_labels(trials_df, flags)
    epochs_df["variant"] = variant_labels(epochs_df, flags)
    if problems:
        shown = "; ".join(str(p) for p in problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        warnings.warn(f"analysis.load: {len(problems)} problem(s) reading {[f.uri for f in folders]}: "
                      f"{shown}{more}. See Sweep.problems.", SweepReadWarning, stacklevel=2)
    return Sweep(trials_df, epochs_df, problems, options, tuple(folders))


def _read_options(folder: Folder, problems: list[Problem]) -> dict:
    relative = "results/sweep.json"
    if not folder.exists(relative):
        problems.append(Problem(folder.display(relative),
                                f"missing: metric and mode default to {DEFAULT_METRIC!r}, 'max'"))
        return {}
    try:
        return dict(json.loads(folder.read_bytes(relative).decode()))
    except (OSError, ValueError, TypeError) as exc:
        problems.append(Problem(folder.display(relative),
                                f"unreadable ({exc}): metric and mode default to {DEFAULT_METRIC!r}, 'max'"))
        return {}


def _read_parquet(folder: Folder, relative: str, problems: list[Problem]) -> pd.DataFrame | None:
    # a read racing the sink's replacement of the file on an object store can mix two versions (a size
    # lookup, then a ranged GET): read again before calling the file unreadable (analysis.contract)
    try:
        table = read_retried(lambda: pq.read_table(io.BytesIO(folder.read_bytes(relative))))
    except Exception as exc:  # pyarrow raises several types for torn or foreign files
        problems.append(Problem(folder.display(relative), f"unreadable, left out ({type(exc).__name__}: {exc})",
                                unreadable=True))
        return None
    return table.to_pandas(types_mapper=_TYPES.get)


_TYPES = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype(),
          pa.string(): pd.StringDtype(), pa.large_string(): pd.StringDtype()}


def _read_folder(folder: Folder, metric: str, maximise: bool, problems: list[Problem],
                 extra: dict[str, str] | None = None):
    frames = []
    if folder.is_dir("results/epochs"):
        for name in folder.list("results/epochs", ".parquet"):
            frame = _read_parquet(folder, f"results/epochs/{name}", problems)
            if frame is not None:
                frames.append(frame)
    else:
        problems.append(Problem(folder.display("results/epochs"), "missing: no per-epoch rows"))
    epochs = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["trial_id", "epoch"])
    epochs["sweep_dir"] = folder.uri
    epochs = _with_stage(epochs, folder.display("results/epochs"), problems)
    duplicated = epochs.duplicated(["trial_id", "epoch"], keep="last")
    if duplicated.any():
        ids = sorted(epochs.loc[duplicated, "trial_id"].astype(str).unique())
        problems.append(Problem(folder.display("results/epochs"), f"{int(duplicated.sum())} duplicated "
                                f"(trial_id, epoch) rows in trials {ids[:5]}: kept the last of each"))
        epochs = epochs[~duplicated]
    epochs = epochs.sort_values(["trial_id", "epoch"], kind="stable", ignore_index=True)

    relative = f"results/{TRIALS_FILE}"
    where = folder.display(relative)
    present = folder.exists(relative)
    trials = _read_parquet(folder, relative, problems) if present else None
    if not present:
        problems.append(Problem(where, "missing: every trial derived from its epoch rows"))
    if trials is None:
        trials = pd.DataFrame(columns=["trial_id"])
    trials["sweep_dir"] = folder.uri
    trials = _with_stage(trials, where, problems)
    repeated = trials["trial_id"].duplicated(keep="last")
    if repeated.any():
        problems.append(Problem(where, f"{int(repeated.sum())} duplicated trial rows "
                                f"{sorted(trials.loc[repeated, 'trial_id'].astype(str).unique())[:5]}: kept the last"))
        trials = trials[~repeated].reset_index(drop=True)
    known = set(trials["trial_id"].astype(str))
    unknown = epochs[~epochs["trial_id"].astype(str).isin(known)]
    if len(unknown) and present:
        ids = sorted(unknown["trial_id"].astype(str).unique())
        problems.append(Problem(where, f"no row for trial(s) {ids[:5]}{' ...' if len(ids) > 5 else ''} "
                                f"that have epoch rows (sweep still running?): derived from their epochs, "
                                f"status {DERIVED_STATUS!r}"))
    if len(unknown):
        trials = pd.concat([trials, _trials_from_epochs(unknown, metric, maximise, extra)], ignore_index=True)
    return _fill_epochs_completed(trials, epochs, where, metric, maximise, problems, extra), epochs


def _with_stage(frame: pd.DataFrame, where: str, problems: list[Problem]) -> pd.DataFrame:
    if "stage" not in frame.columns:
        if len(frame):
            problems.append(Problem(where, "no 'stage' column: rows taken as stage 'sweep'"))
        frame["stage"] = "sweep"
    frame["stage"] = frame["stage"].astype("string").fillna("sweep")
    return frame


def _trials_from_epochs(epochs: pd.DataFrame, metric: str, maximise: bool,
                        extra: dict[str, str] | None = None) -> pd.DataFrame:
    """One trial row per trial from its epoch rows: last epoch's config, best/final metrics (the sweep's metric
    under ``maximise``, its other objectives ``extra`` (name -> mode) under theirs, as the sink summarises them)."""
    rows = []
    for (_, trial_id), group in epochs.groupby(["sweep_dir", "trial_id"], sort=True):
        group = group.sort_values("epoch")
        last = group.iloc[-1]
        row = {c: last[c] for c in ["experiment", "stage", "trial_id", "sweep_dir", *config_columns(group)]
               if c in group.columns}
        row.update(status=DERIVED_STATUS, stop_reason="derived from epoch rows (no trials.parquet row)",
                   epochs_completed=int(group["epoch"].max()))
        if "config.seed" in group.columns:
            row["seed"] = last["config.seed"]
        records = group.to_dict("records")
        row.update(contract.summarise(records, metric, "max" if maximise else "min", extra))
        rows.append(row)
    return pd.DataFrame(rows)


def _fill_epochs_completed(trials: pd.DataFrame, epochs: pd.DataFrame, where: str, metric: str, maximise: bool,
                           problems: list[Problem], extra: dict[str, str] | None = None) -> pd.DataFrame:
    """Reconcile the trials table with the epoch rows. The sink rewrites trials.parquet at most every
    few seconds but each epoch file at once, so a running (or killed) sweep's epoch rows can be ahead:
    then ``epochs_completed`` and the ``best_``/``final_`` columns are recomputed from them."""
    if len(trials) == 0:
        return trials
    reached = epochs.groupby("trial_id")["epoch"].max() if len(epochs) else pd.Series(dtype="Int64")
    seen = pd.to_numeric(trials["trial_id"].astype(str).map(lambda t: reached.get(t, pd.NA)), errors="coerce")
    if "epochs_completed" not in trials.columns:
        trials["epochs_completed"] = pd.NA
    claimed = pd.to_numeric(trials["epochs_completed"], errors="coerce")
    lacking = (claimed.fillna(0) > 0) & seen.isna()
    for trial_id in trials.loc[lacking, "trial_id"]:
        problems.append(Problem(where, f"trial {trial_id!r} reports epochs but none of its epoch rows was readable"))
    ahead = (seen > claimed.fillna(0)).fillna(False)
    if ahead.any():
        fresh = _trials_from_epochs(epochs[epochs["trial_id"].isin(trials.loc[ahead, "trial_id"])], metric, maximise,
                                    extra)
        fresh = fresh.set_index("trial_id")
        columns = [c for c in fresh.columns
                   if c.startswith(("best_", "final_")) or c in ("epochs_completed", *EPOCH_TIME_COLUMNS)]
        for index in trials.index[ahead]:
            for column in columns:
                trials.loc[index, column] = fresh.at[trials.at[index, "trial_id"], column]
    trials["epochs_completed"] = pd.to_numeric(trials["epochs_completed"], errors="coerce").fillna(seen)
    return trials


def _settle(frame: pd.DataFrame) -> pd.DataFrame:
    """Stable dtypes after concatenating files: object columns (all-null in some file) become
    boolean / Int64 / float64 / string; counters become Int64."""
    for column in frame.columns:
        values = frame[column]
        if values.dtype == object:
            present = values.dropna()
            if present.map(lambda v: isinstance(v, bool)).all() and len(present):
                frame[column] = values.astype("boolean")
            elif present.map(lambda v: isinstance(v, int) and not isinstance(v, bool)).all() and len(present):
                frame[column] = values.astype("Int64")
            elif present.map(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)).all():
                frame[column] = pd.to_numeric(values, errors="coerce").astype("float64")
            else:
                frame[column] = values.astype("string")
        if column in INT_COLUMNS:
            frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("Int64")
    for column in STRING_COLUMNS:
        if column in frame.columns:
            frame[column] = frame[column].astype("string")
    return frame
