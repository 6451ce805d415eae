"""The results contract: what ``tune`` writes and ``analysis`` reads, defined once (docs/ARCHITECTURE.md,
"Parquet contract").

Both sides import this module, so it imports only the standard library and pyarrow (never Ray, torch,
``xbm`` or ``tune``). It holds:

* the column names and their types (``column_type``): a column's type is fixed by its name, never by
  the first value seen, so files written at different times concatenate;
* the best/final summary of a trial's epoch rows (``summarise``), used by the Parquet sink and by the
  loader's fallback for trials known only from their epoch rows;
* the retry rule for reads of a file that may be being replaced on an object store (``read_retried``);
* the record of a sweep, ``results/sweep.json``: ``SweepRecord`` (defined in ``analysis/sweep_record.py``,
  one concept per file, and imported from here).
"""
from __future__ import annotations

import math
import numbers
import time
from typing import Any, Callable, Mapping, Sequence, TypeVar

import pyarrow as pa

from analysis.sweep_record import RECORD_VERSION, SpaceRecord, SweepRecord  # noqa: F401  (re-exported)

#: the ``stage`` column's values: a sweep's own trials, its confirm runs (``xbm-tune confirm``), its refit runs
#: (``xbm-tune refit``)
SWEEP_STAGE, CONFIRM_STAGE, REFIT_STAGE = "sweep", "confirm", "refit"
STAGES = (SWEEP_STAGE, CONFIRM_STAGE, REFIT_STAGE)
#: prefix of the columns holding the trial's TrainConfig values, ``config.<dotted name>``
CONFIG_PREFIX = "config."
#: the folder of a sweep's results, and its files
RESULTS = "results"
TRIALS_FILE = "trials.parquet"
EPOCHS_DIR = "epochs"
SWEEP_JSON = "sweep.json"

DEFAULT_METRIC = "recall_at_1"
#: the statuses of trials that ran to their end (their budget, or a scheduler's rung): ranked, exportable
FINISHED_STATUSES = ("completed", "stopped_early")
#: metrics that always get best_/final_ columns, whatever the sweep's metric (higher is better)
ALWAYS_SUMMARISED = ("recall_at_1", "map_at_r")

# ---- column types ---------------------------------------------------------------------------------
#: counters: int64 wherever they appear (epoch rows and trials.parquet)
INT_COLUMNS = frozenset({"epoch", "epochs_completed", "best_epoch", "seed", "retries", "collapsed_epochs",
                         "skipped_images", "memory_bytes", "workers", "train_classes"})
#: text columns (``sweep_dir`` and ``variant`` are added by ``analysis.load``, never written)
STRING_COLUMNS = frozenset({"experiment", "stage", "trial_id", "trial_name", "status", "stop_reason", "error",
                            "node_id", "gpu_ids", "git_sha", "package_version", "eval_split", "best_weights", "exploits",
                            "sweep_dir"})
#: seconds of one epoch, by where they went: the training pass, the part of it spent waiting
#: for the next batch, everything evaluation does, writing the checkpoint
EPOCH_TIME_COLUMNS = ("train_s", "data_wait_s", "eval_s", "checkpoint_s")
#: everything before epoch 1 (data, model, references, warm-up): reported on every epoch row, constant within
#: one start of a trial; a restart from a checkpoint adds its own set-up to the one recorded there
SETUP_COLUMN = "setup_s"
#: AXBN's Kalman gain K in use at the epoch's end (AXBN paper Algorithm 1, line 2); null for other normalisers
KALMAN_GAIN = "kalman_gain"
#: the papers' metrics under their definitions (docs/ARCHITECTURE.md), float64 and null where not measured: NMI;
#: true super-class among the k nearest super-class means, k = 1..5 (thesis Table 5.16), and the 10-NN super-class
#: share (both null without super-classes); drift over 10, 100, 1000 iterations (XBM Eq. 2, Fig. 3; null until
#: that many have run); valid negatives per iteration, from the memory and the batch (XBM Fig. 4)
PAPER_METRICS = ("nmi", *(f"superclass_top_{k}" for k in range(1, 6)), "superclass_neighbour_share",
                 *(f"drift_{d}_{s}" for d in (10, 100, 1000) for s in ("mean", "max")),
                 "valid_neg_memory", "valid_neg_batch")
#: the epoch columns declared ahead of the code that reports them, so that every epoch file has them
#: (null until reported; ``gpu_memory_peak_gib`` stays null on the CPU, ``kalman_gain`` without AXBN)
EPOCH_DECLARED = (*EPOCH_TIME_COLUMNS, SETUP_COLUMN, "gpu_memory_peak_gib", "skipped_images", "memory_bytes",
                  KALMAN_GAIN, *PAPER_METRICS)
#: the number of classes a run trained on (config ``train_on``: a refit's exceeds its sweep's); every epoch row
TRAIN_CLASSES = "train_classes"
#: trials.parquet values taken from the trial's latest epoch row that has one
FROM_LAST_ROW = ("reference_raw_recall_at_1", SETUP_COLUMN, "best_weights", TRAIN_CLASSES)
FLOAT_COLUMNS = frozenset({*EPOCH_TIME_COLUMNS, SETUP_COLUMN, "gpu_memory_peak_gib", "train_fraction",
                           "wall_time_s", "gpu_hours", "reference_raw_recall_at_1", KALMAN_GAIN, *PAPER_METRICS})

def column_type(name: str, value: Any = None) -> pa.DataType:
    """A column's Arrow type: declared by name (``INT_COLUMNS``, ``STRING_COLUMNS``, ``FLOAT_COLUMNS``);
    another reported value is string when it is text, float64 otherwise. ``config.*`` columns take
    TrainConfig's field types (``tune.results.parquet.config_fields``)."""
    if name in INT_COLUMNS:
        return pa.int64()
    if name in STRING_COLUMNS:
        return pa.string()
    if name in FLOAT_COLUMNS:
        return pa.float64()
    return pa.string() if isinstance(value, str) else pa.float64()


def epoch_key_fields() -> list[pa.Field]:
    """The columns every epoch file starts with, then ``EPOCH_DECLARED`` after the metrics."""
    return [pa.field(n, column_type(n)) for n in ("experiment", "stage", "trial_id", "epoch", "node_id", "gpu_ids")]


#: objectives that are a trial's own columns in trials.parquet (no epoch column, no best_/final_)
TRIAL_OBJECTIVES = ("gpu_hours", "wall_time_s")


def summary_names(metric: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The metrics that get ``best_``/``final_`` columns: the sweep's, its other objectives (``extra``, but
    ``TRIAL_OBJECTIVES``), then ``ALWAYS_SUMMARISED``."""
    return tuple(dict.fromkeys((metric, *(m for m in extra if m not in TRIAL_OBJECTIVES), *ALWAYS_SUMMARISED)))


def objective_column(metric: str) -> str:
    """The trials.parquet column holding a trial's value of an objective: ``final_<metric>`` (the value its
    last epoch reported, what the searcher is told), or the trial's own column for ``TRIAL_OBJECTIVES``."""
    return metric if metric in TRIAL_OBJECTIVES else f"final_{metric}"


def trial_fields(metric: str, metric_types: Mapping[str, pa.DataType] | None = None,
                 extra: Sequence[str] = ()) -> list[pa.Field]:
    """trials.parquet's columns before the ``config.*`` ones, in order. ``metric_types`` (a metric's
    type as reported) types its ``best_``/``final_`` columns; float64 otherwise. ``extra``: the sweep's
    other objectives."""
    f, i = pa.float64(), pa.int64()
    summary = []
    for name in summary_names(metric, extra):
        kind = (metric_types or {}).get(name, f)
        summary += [pa.field(f"best_{name}", kind), pa.field(f"final_{name}", kind)]
        if name == metric:
            summary.append(pa.field("best_epoch", i))
    head = ["experiment", "stage", "trial_id", "trial_name", "status", "stop_reason", "error", "epochs_completed",
            "collapsed_epochs"]
    tail = ["reference_raw_recall_at_1", "wall_time_s", "gpu_hours", *EPOCH_TIME_COLUMNS, SETUP_COLUMN,
            "train_fraction", "best_weights", "exploits", "retries", "seed", "workers", TRAIN_CLASSES, "node_id",
            "gpu_ids", "git_sha", "package_version"]
    return ([pa.field(n, column_type(n)) for n in head] + summary + [pa.field(n, column_type(n)) for n in tail])


# ---- the summary rule -----------------------------------------------------------------------------
def finite(value: Any) -> bool:
    """A real, finite number (not a bool, None, NA, NaN or inf): a usable metric value."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def summarise(rows: Sequence[Mapping[str, Any]], metric: str, mode: str,
              extra: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A trial's summary from its epoch rows (sorted by epoch):

    * ``best_<m>``, ``final_<m>`` for ``m`` in ``summary_names(metric, extra)``, and ``best_epoch`` (the sweep
      metric's): the best under ``mode`` for the sweep's metric, under its own mode for an ``extra``
      objective (name -> mode; ``max`` for the others), the first
      epoch reaching it on a tie; final = the last FINITE value (an epoch without evaluation, a NaN, is
      skipped, so an ``eval_every`` > 1 trial has a final value); None when no value is finite;
    * the sums of ``EPOCH_TIME_COLUMNS`` over the rows (None when no row has a finite value);
    * ``FROM_LAST_ROW``: the latest row's non-null value.
    """
    out: dict[str, Any] = {}
    modes = {**dict(extra or {}), metric: mode}
    for name in summary_names(metric, tuple(extra or ())):
        scored = [(r[name], r.get("epoch")) for r in rows if finite(r.get(name))]
        higher = modes.get(name, "max") == "max"
        best = (max if higher else min)(scored, key=lambda p: p[0]) if scored else (None, None)
        out[f"best_{name}"] = best[0]
        out[f"final_{name}"] = scored[-1][0] if scored else None
        if name == metric:
            out["best_epoch"] = None if best[1] is None else int(best[1])
    for name in EPOCH_TIME_COLUMNS:
        values = [float(r[name]) for r in rows if finite(r.get(name))]
        out[name] = math.fsum(values) if values else None
    for name in FROM_LAST_ROW:
        out[name] = next((r[name] for r in reversed(rows) if _present(r.get(name))), None)
    return out


def train_fraction(train_s: Any, wall_time_s: Any) -> float | None:
    """``train_s / wall_time_s``: the share of a trial's wall time spent in training passes; None when
    either is missing (or the wall time is not positive)."""
    if not (finite(train_s) and finite(wall_time_s)) or wall_time_s <= 0:
        return None
    return float(train_s) / float(wall_time_s)


def _present(value: Any) -> bool:
    if value is None:
        return False
    try:
        return not (value != value)  # NaN, pandas NA
    except TypeError:  # pandas NA refuses bool()
        return False


# ---- reads ----------------------------------------------------------------------------------------
#: a read of a file being replaced on an object store can mix two versions (a size lookup, then a ranged
#: GET; seen on S3 while the sink rewrote trials.parquet): read again this many times in all, this far apart
READ_ATTEMPTS = 5
READ_RETRY_DELAY_S = 0.1

T = TypeVar("T")


class UnreadableFileError(ValueError):
    """A results file that stays unreadable after ``READ_ATTEMPTS`` reads (truncated, or not Parquet)."""

    def __init__(self, path: str, cause: BaseException) -> None:
        super().__init__(f"{path} is unreadable ({type(cause).__name__}: {cause}): a truncated or foreign file; "
                         f"restore it, or delete it to have it rebuilt from the epoch rows")
        self.path = path


def read_retried(read: Callable[[], T], errors: tuple[type[BaseException], ...] = (Exception,),
                 attempts: int = READ_ATTEMPTS, delay_s: float = READ_RETRY_DELAY_S) -> T:
    """``read()``, repeated on ``errors`` up to ``attempts`` times in all; the last error propagates."""
    for attempt in range(attempts):
        try:
            return read()
        except errors:
            if attempt == attempts - 1:
                raise
            time.sleep(delay_s)
    raise AssertionError("unreachable")  # attempts >= 1


def config_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """A trials.parquet row's ``config.*`` values under their dotted TrainConfig names."""
    return {k[len(CONFIG_PREFIX):]: v for k, v in row.items() if k.startswith(CONFIG_PREFIX)}

