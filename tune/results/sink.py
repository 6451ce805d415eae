"""The Parquet sink: a Tune ``Callback`` on the driver that writes every epoch of every trial to Parquet.

Rows are keyed by ``(trial_id, epoch)`` and the existing files are loaded in ``setup`` (which Tune calls
on a fresh run and on ``Tuner.restore``), so a trial retried from its checkpoint at epoch k, or a resumed
sweep, overwrites epochs > k instead of appending them: no duplicated rows, no lost rows. Files are
replaced atomically (``analysis.location.Folder``).

Driver cost (benchmarks/bench_sink.py): a trial's epoch file is rewritten at every result (its rows must
be on disk before Tune records the checkpoint a resumed trial continues from); the sink keeps each row
cleaned to the file's types, so a result pays one conversion of the trial's rows (one struct array) and
the Parquet encoding. ``trials.parquet`` holds one row per trial, so a rewrite grows with the sweep: it
is rewritten at most once per ``trials_interval_s`` (status changes included; only changed rows are
converted, the others are taken from the table written last time), when Tune's loop ends a step after
that interval, and at the experiment's end. A driver killed inside that
interval loses at most the last status changes of trials.parquet, never an epoch row: on resume the
first step reconciles the rows with the trials Tune restored (a trial Tune holds as terminated but the
file as running is completed from its epoch rows).

``status`` in trials.parquet: ``running`` while a trial trains (or waits for a retry), ``completed`` when
it reached its epoch budget (``config.epochs``), ``stopped_early`` when the scheduler stopped it before,
``failed`` on an error that exhausted ``max_failures`` or on a non-finite loss (not retried: it is
deterministic). ``stop_reason`` says why in words, ``error`` holds the exception's message.

A collapsed epoch (``xbm.evaluate.signals.collapsed``) is logged as a warning naming the trial (logger
``tune.results.sink``: ``xbm-tune`` prints it on stderr; a notebook routes or silences it with ``logging``).
"""
from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa
from ray.tune import Callback
from ray.tune.result import AUTO_RESULT_KEYS, DEBUG_METRICS

from analysis import contract
from analysis.contract import CONFIG_PREFIX, EPOCH_DECLARED, column_type, epoch_key_fields, train_fraction, trial_fields
from analysis.location import Folder
from tune.results.keys import ERROR_KEY, GPU_KEY, NODE_KEY, RELOCATED_KEY, STOP_REASON_KEY
from tune.results.parquet import clean_row, config_fields, given_config, table_from_values
from tune.results.trial_config import config_workers, gpu_hours, train_config, trial_gpus
from xbm.evaluate.signals import collapse_message, collapsed

log = logging.getLogger(__name__)

#: Tune's own bookkeeping keys, not metrics of the run
_TUNE_KEYS = frozenset(AUTO_RESULT_KEYS) | frozenset(DEBUG_METRICS) | {
    "done", "should_checkpoint", "experiment_tag", "trial_id", "training_iteration", "checkpoint_dir_name"}
TERMINAL = ("completed", "stopped_early", "failed")
#: an epoch file is a few dozen rows rewritten at every result: plain encoding costs ~25% less CPU than
#: pyarrow's default (dictionary, statistics, snappy) and readers cannot tell
EPOCH_FILE_OPTIONS = {"use_dictionary": False, "write_statistics": False, "compression": "none"}


class ParquetSink(Callback):
    """Writes ``results/epochs/<trial_id>.parquet`` and ``results/trials.parquet``.

    ``stage`` tells sweep rows from confirm rows (``sweep`` | ``confirm``); ``swept`` lists the space's
    parameter names, whose absence from a trial's config (a conditional parameter whose ``when`` did
    not hold) is written as null; ``stop_reasons`` (trial_id -> text) is filled by the scheduler; ``extra``
    (name -> mode) are the sweep's other objectives, summarised like its metric; and
    ``exploits`` (trial_id -> ``"<donor>@<epoch>"`` entries) by population-based training, whose explore
    also changes a trial's config: every epoch row carries the values the trial had at that epoch.
    """

    def __init__(self, results_dir: str | None, experiment: str, metric: str, mode: str, stage: str = "sweep",
                 swept: tuple[str, ...] = (), stop_reasons: Mapping[str, str] | None = None,
                 provenance: Mapping[str, Any] | None = None, extra: Mapping[str, str] | None = None,
                 exploits: Mapping[str, list[str]] | None = None, gpus_per_worker: float | None = None) -> None:
        self.results_dir = results_dir
        # a trial's GPUs are its workers x these (tune.results.trial_config.trial_gpus); None: its placement group's
        self.gpus_per_worker = gpus_per_worker
        self.extra = dict(extra or {})  # the sweep's other objectives: name -> mode (best_/final_ columns)
        self.experiment = experiment
        self.metric, self.mode, self.stage = metric, mode, stage
        self.swept = tuple(swept)
        self.stop_reasons = stop_reasons if stop_reasons is not None else {}
        self.exploits = exploits if exploits is not None else {}
        self.provenance = dict(provenance or {})
        self.trials_interval_s = 2.0
        self._reset()

    def _reset(self) -> None:
        self.epochs: dict[str, dict[int, dict]] = {}
        self.trials: dict[str, dict] = {}
        self.metric_types: dict[str, Any] = {}
        self.storage: Folder | None = None
        self._configs: dict[str, dict[str, Any]] = {}
        self._config_sources: dict[str, Any] = {}  # the trial.config each entry of _configs was made from
        self._last_trials_write = -math.inf
        self._reconciled = False
        self._dirty: set[str] = set()  # trial ids whose row changed since trials.parquet was written
        # trials.parquet as written last: its table, and each trial's row number in it
        self._trials_table: pa.Table | None = None
        self._trials_rows: dict[str, int] = {}
        # trial id -> epoch -> (its row, that row cleaned for the epoch fields of self._epoch_fields)
        self._epoch_values: dict[str, dict[int, tuple[dict, tuple]]] = {}
        self._epoch_values_size = -1  # len(metric_types) the cleaned rows were made for
        self._epoch_fields: tuple[int, list[pa.Field], pa.Schema] | None = None

    # ---- Tune hooks ---------------------------------------------------------------------------
    def setup(self, **info) -> None:
        """Forget in-memory rows; the files are (re)loaded when the first trial event names the folder.

        Tune calls this on a fresh run and on ``Tuner.restore``. Without an explicit ``results_dir``
        the folder is ``<experiment>/results`` on the trial's own storage filesystem, so a sweep
        moved to another folder (or read from a bucket) still writes next to its Tune state.
        """
        self._reset()

    def _open(self, trial) -> None:
        if self.storage is not None:
            return
        if self.results_dir is not None:
            self.storage = Folder(self.results_dir)
        else:
            context = trial.storage
            self.storage = Folder(f"{context.experiment_fs_path.rstrip('/')}/results",
                                  filesystem=context.storage_filesystem)
        self._load()

    def _load(self) -> None:
        """Load what earlier runs of this sweep (or the sweep a confirm stage joins) already wrote."""
        self.storage.makedirs("epochs")
        for name in self.storage.list("epochs"):
            for row in self.storage.read_table(f"epochs/{name}").to_pylist():
                self._remember_types(row)
                self.epochs.setdefault(row["trial_id"], {})[int(row["epoch"])] = row
        table = self.storage.read_table("trials.parquet")
        for row in table.to_pylist() if table is not None else []:
            self.trials[row["trial_id"]] = row
        if table is not None:  # the next write converts only the rows that change (if the columns agree)
            self._trials_table = table
            self._trials_rows = {t: i for i, t in enumerate(table.column("trial_id").to_pylist())}

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        row = self._trial_row(trial)
        # Tune starts only trials that will train: new ones, retries, and failed ones that `resume` restarts
        # (resume_errored), whose row must not read "failed" while they train again.
        row["status"] = "running"
        self._summarise(trial, row, trial.last_result or {})  # a restored trial: from its epoch rows
        self._write_trials_due()

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        row = self._trial_row(trial)
        self._update_location(row, result)
        self._relocate(trial.trial_id, row, result.get(RELOCATED_KEY))
        if ERROR_KEY in result:
            row.update(status="failed", stop_reason=str(result.get(STOP_REASON_KEY) or "non-finite loss"),
                       error=str(result[ERROR_KEY]))
            self._summarise(trial, row, result)
            self._write_trials_due()
            return
        epoch = int(result["epoch"])
        metrics = {k: v for k, v in result.items()
                   if k not in _TUNE_KEYS and not isinstance(v, (dict, list))}
        epoch_row = {"experiment": self.experiment, "stage": self.stage, "trial_id": trial.trial_id,
                     **metrics, "epoch": epoch}
        self._remember_types(epoch_row)  # before the ~50 config.* columns, which it skips
        epoch_row.update(self._configs[trial.trial_id])
        self.epochs.setdefault(trial.trial_id, {})[epoch] = epoch_row
        warning = collapse_message(epoch_row, f"trial {trial.trial_id}")
        if warning:
            log.warning("%s", warning)
        row["status"] = "running"
        self._summarise(trial, row, result)
        self._write_epochs(trial.trial_id)
        self._write_trials_due()

    def on_step_begin(self, iteration, trials, **info) -> None:
        if not self._reconciled and trials:
            self._reconciled = True
            self._reconcile(trials)

    def on_step_end(self, iteration, trials, **info) -> None:
        self._write_trials_due()  # a change that no later event would write

    def on_experiment_end(self, trials, **info) -> None:
        if self.storage is not None and (self._dirty or not self.storage.exists("trials.parquet")):
            self._write_trials()

    def _reconcile(self, trials) -> None:
        """On ``Tuner.restore``: a trial Tune restored as finished but whose row the killed driver had not
        yet written as finished gets its final row now (Tune sends no more events for it)."""
        self._open(trials[0])
        for trial in trials:
            status = (self.trials.get(trial.trial_id) or {}).get("status")
            if trial.status == "TERMINATED" and status not in TERMINAL:
                self.on_trial_complete(0, trials, trial)
            elif trial.status == "ERROR" and status != "failed":
                self.on_trial_error(0, trials, trial)

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        row = self._trial_row(trial)
        self._epoch_values.pop(trial.trial_id, None)  # its file is written for good
        self._summarise(trial, row, trial.last_result or {})  # epochs_completed from the rows kept
        if row["status"] != "failed":
            budget = int(trial.config.get("epochs") or train_config(trial.config).epochs)
            done = int(row.get("epochs_completed") or 0)
            if done >= budget:
                row.update(status="completed", stop_reason=f"reached the epoch budget ({budget})", error=None)
            else:
                reason = self.stop_reasons.get(trial.trial_id, "stopped by the scheduler")
                row.update(status="stopped_early", stop_reason=f"{reason} after {done}/{budget} epochs")
        self._write_trials_due()

    def on_trial_recover(self, iteration, trials, trial, **info) -> None:
        row = self._trial_row(trial)
        row.update(status="running", retries=int(trial.num_failures),
                   stop_reason=f"retrying from the last checkpoint (failure {trial.num_failures})",
                   error=_error_message(trial))
        self._write_trials_due()

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        row = self._trial_row(trial)
        row.update(status="failed", retries=int(trial.num_failures), error=_error_message(trial),
                   stop_reason=f"error after {trial.num_failures} failure(s) (max_failures exhausted)")
        self._summarise(trial, row, trial.last_result or {})
        self._write_trials_due()

    # ---- rows -----------------------------------------------------------------------------------
    def _trial_row(self, trial) -> dict:
        self._open(trial)
        row = self.trials.get(trial.trial_id)
        self._dirty.add(trial.trial_id)  # every hook changes the row it asks for
        if row is None:
            row = {"experiment": self.experiment, "stage": self.stage, "trial_id": trial.trial_id,
                   "status": "running", "epochs_completed": 0, "retries": 0, **self.provenance}
            self.trials[trial.trial_id] = row
        row["trial_name"] = str(trial)
        if self._config_sources.get(trial.trial_id) is not trial.config:  # new, or PBT's explore replaced it
            # (a relocated trial's paths are put back by _relocate: every result of it carries them)
            self._configs[trial.trial_id] = self._config_columns(trial.config)
            self._config_sources[trial.trial_id] = trial.config
        row.update(self._configs[trial.trial_id])
        if self.exploits.get(trial.trial_id):
            row["exploits"] = "; ".join(self.exploits[trial.trial_id])
        seed = row.get(CONFIG_PREFIX + "seed")
        row["seed"] = seed
        row["workers"] = config_workers(trial.config)
        return row

    def _config_columns(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """``config.*`` of the resolved TrainConfig; swept parameters absent from the trial are null.

        A config the trainer refuses keeps the values it was given (each that fits its column; its trial fails
        with the reason, which ``on_trial_error`` records): raised here, in a Tune callback, it would stop the
        whole sweep, every other trial with it (as Ray's PBT exploring past a range's bound once did)."""
        try:
            resolved = train_config(config).to_dict()
        except ValueError:
            resolved = given_config(config)
        out = {CONFIG_PREFIX + k: v for k, v in resolved.items()}
        for key in self.swept:
            if config.get(key) is None:
                out[CONFIG_PREFIX + key] = None
        return out

    def _update_location(self, row: dict, result: Mapping[str, Any]) -> None:
        for key in (NODE_KEY, GPU_KEY):
            if result.get(key) is not None:
                row[key] = result[key]

    def _relocate(self, trial_id: str, row: dict, moved: Mapping[str, Any] | None) -> None:
        """A resumed trial whose files moved reports where it read them: its ``config.*`` say so from now on."""
        if moved:
            columns = {CONFIG_PREFIX + key: value for key, value in moved.items()}
            self._configs[trial_id].update(columns)
            row.update(columns)

    def _summarise(self, trial, row: dict, result: Mapping[str, Any]) -> None:
        """The trial's summary over the rows kept (``analysis.contract.summarise``: best_/final_ of the sweep
        metric and of recall_at_1 / map_at_r, the time sums), its wall time and ``train_fraction``."""
        rows = [self.epochs.get(trial.trial_id, {})[e] for e in sorted(self.epochs.get(trial.trial_id, {}))]
        row["epochs_completed"] = len(rows)
        # epochs whose loss saw no positive pair
        row["collapsed_epochs"] = sum(1 for r in rows if collapsed(r))
        row.update(contract.summarise(rows, self.metric, self.mode, self.extra))
        if "time_total_s" in result:
            row["wall_time_s"] = float(result["time_total_s"])
        gpus = trial_gpus(trial, getattr(self, "gpus_per_worker", None))  # every worker's GPUs
        if row.get("wall_time_s") is not None:
            row["gpu_hours"] = gpu_hours(row["wall_time_s"], gpus)
        row["train_fraction"] = train_fraction(row.get("train_s"), row.get("wall_time_s"))

    # ---- files ----------------------------------------------------------------------------------
    def _remember_types(self, row: Mapping[str, Any]) -> None:
        for key, value in row.items():
            if key.startswith(CONFIG_PREFIX) or key in self.metric_types or value is None:
                continue
            self.metric_types[key] = column_type(key, value)

    def epoch_fields(self) -> list[pa.Field]:
        """The epoch files' fields; metric_types only grows, so its size says when they change."""
        if self._epoch_fields is None or self._epoch_fields[0] != len(self.metric_types):
            fields = self._build_epoch_fields()
            self._epoch_fields = (len(self.metric_types), fields, pa.schema(fields))
        return self._epoch_fields[1]

    def _build_epoch_fields(self) -> list[pa.Field]:
        fixed = epoch_key_fields()
        declared = [pa.field(n, column_type(n)) for n in EPOCH_DECLARED]  # null until the trainer reports them
        names = {f.name for f in fixed + declared}
        metrics = [pa.field(k, t) for k, t in self.metric_types.items() if k not in names]
        return fixed + metrics + declared + config_fields()

    def trial_fields(self) -> list[pa.Field]:
        return trial_fields(self.metric, self.metric_types, tuple(self.extra)) + config_fields()

    def _write_epochs(self, trial_id: str) -> None:
        """Rewrite the trial's epoch file from its rows. Each row is cleaned once and kept (a trial's file
        is a few dozen rows of ~70 columns, rewritten at every result); a row replaced since (a restored
        trial re-reporting an epoch) or a change of the fields (a metric first reported late) cleans it again."""
        fields = self.epoch_fields()
        if self._epoch_fields[0] != self._epoch_values_size:
            self._epoch_values, self._epoch_values_size = {}, self._epoch_fields[0]
        rows, cached = self.epochs[trial_id], self._epoch_values.setdefault(trial_id, {})
        values = []
        for e in sorted(rows):
            row, known = rows[e], cached.get(e)
            if known is None or known[0] is not row:
                known = cached[e] = (row, clean_row(row, fields))
            values.append(known[1])
        table = table_from_values(values, fields)
        self.storage.write_table(f"epochs/{trial_id}.parquet", table, **EPOCH_FILE_OPTIONS)

    def _write_trials_due(self) -> None:
        if self._dirty and time.monotonic() - self._last_trials_write >= self.trials_interval_s:
            self._write_trials()

    def _write_trials(self) -> None:
        """Rewrite trials.parquet whole. Only the rows changed since the last write are converted: they
        are appended to the table written last time and every row is taken, in the trials' order, from
        there (converting 2,000 rows of ~90 columns in Python costs ~8 ms; the take, well under 1)."""
        fields = self.trial_fields()
        last = self._trials_table
        if last is None or not last.schema.equals(pa.schema(fields)):  # first write, or a new column
            last, self._trials_rows = table_from_values([], fields), {}
        changed = [t for t in self.trials if t in self._dirty or t not in self._trials_rows]
        both = pa.concat_tables([last, table_from_values([clean_row(self.trials[t], fields) for t in changed], fields)])
        at = {**self._trials_rows, **{t: last.num_rows + i for i, t in enumerate(changed)}}
        table = both.take([at[t] for t in self.trials]) if changed else last
        self.storage.write_table("trials.parquet", table)
        self._trials_table, self._trials_rows = table, {t: i for i, t in enumerate(self.trials)}
        self._dirty.clear()
        self._last_trials_write = time.monotonic()
        log.debug("trials.parquet rewritten: %d trial(s), %d changed", len(self.trials), len(changed))


def _error_message(trial) -> str | None:
    """The exception's own message (last line of the stored traceback), not the whole traceback.

    Read from the driver's copy of the trial's error.txt when there is one: Tune writes it there and
    syncs it to the storage folder later, so ``trial.get_error()`` (which reads storage) is still
    empty when ``on_trial_error`` runs."""
    path = getattr(trial, "error_file", None)
    text = Path(path).read_text() if path and os.path.isfile(path) else trial.get_error()
    if not text:
        return None
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1][:2000] if lines else None
