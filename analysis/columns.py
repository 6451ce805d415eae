"""Column names of the Parquet contract (docs/ARCHITECTURE.md) and small helpers over them.

Trials and epochs carry every config value as ``config.<dotted name>`` (``xbm.config.TrainConfig``
names); ``stage`` is ``sweep`` or ``confirm``; ``status`` one of ``STATUSES``. ``load`` adds two
derived columns: ``sweep_dir`` (the folder a row came from) and ``variant`` (see ``variant_labels``).
"""
from __future__ import annotations

import pandas as pd

from analysis.contract import (CONFIG_PREFIX, DEFAULT_METRIC, EPOCH_TIME_COLUMNS,  # noqa: F401  (re-exported)
                               SETUP_COLUMN)

KIND = "config.normaliser.kind"
MEMORY_ENABLED = "config.memory.enabled"
OBJECTIVE = "config.objective"
SUPERVISED = "supervised"
NO_MEMORY = "no_memory"
# Flags that split a normaliser kind into variants when a sweep varies them (the `variants` space).
VARIANT_FLAGS = ("config.normaliser.centre_only", "config.normaliser.unit_norm")
SEED_COLUMNS = ("seed", "config.seed")
KEY = ["sweep_dir", "trial_id"]  # a trial's identity: trial ids are only unique inside one sweep
# Metrics where lower is better; every other metric (recalls, MAP@R, ...) is maximised. Only for a metric other
# than the sweep's own (and its test_ twin), whose direction is the sweep's --mode (``higher_is_better``).
LOWER_IS_BETTER = ("loss", "epoch_time_s", "drift_mean", "drift_max", "staleness_mean", "val_oneshot_error",
                   "oneshot_error", "reference_raw_oneshot_error", "reference_untrained_oneshot_error",
                   *(f"drift_{d}_{s}" for d in (10, 100, 1000) for s in ("mean", "max")),
                   "intra_distance_mean", "wall_time_s", "gpu_hours", *EPOCH_TIME_COLUMNS, SETUP_COLUMN,
                   "gpu_memory_peak_gib", "skipped_images")


def config_column(param: str) -> str:
    """``normaliser.lambda_mu`` or ``config.normaliser.lambda_mu`` -> ``config.normaliser.lambda_mu``."""
    return param if param.startswith(CONFIG_PREFIX) else CONFIG_PREFIX + param


def param_name(column: str) -> str:
    """``config.normaliser.lambda_mu`` -> ``normaliser.lambda_mu``."""
    return column[len(CONFIG_PREFIX):] if column.startswith(CONFIG_PREFIX) else column


def config_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c.startswith(CONFIG_PREFIX)]


def varying_columns(frame: pd.DataFrame, exclude: tuple[str, ...] = ("config.seed",)) -> list[str]:
    """Config columns that take more than one value (null counts as a value: a conditional
    parameter absent from some trials varies)."""
    out = []
    for column in config_columns(frame):
        if column in exclude:
            continue
        values = frame[column]
        if values.nunique(dropna=True) + int(values.isna().any() and values.notna().any()) > 1:
            out.append(column)
    return out


def higher_is_better(metric: str, sweep_metric: str, sweep_mode: str) -> bool:
    """The sweep's own mode for its metric and for that metric on the test split (``test_<metric>``, what the
    confirm stage reports); otherwise by name (``LOWER_IS_BETTER``)."""
    bare = metric[len("test_"):] if metric.startswith("test_") else metric
    if sweep_metric in (metric, bare):
        return sweep_mode == "max"
    return bare not in LOWER_IS_BETTER


def variant_labels(frame: pd.DataFrame, flags: tuple[str, ...]) -> pd.Series:
    """One label per row: the normaliser kind, plus the name of every flag in ``flags`` that is on,
    e.g. ``pcxbn``, ``xbn+centre_only``; ``no_memory`` for the baseline with ``memory.enabled=False``; a
    label-free objective prefixes its name (``moco:xbn``, ``moco:none``), the supervised default none, so
    sweeps from before objectives existed keep their labels. ``flags`` are the ``VARIANT_FLAGS`` the whole
    sweep varies, so that trials and epochs are labelled alike."""
    if KIND in frame.columns:
        labels = frame[KIND].astype("string").fillna("unknown")
    else:
        labels = pd.Series("all", index=frame.index, dtype="string")
    for flag in flags:
        if flag in frame.columns:
            on = frame[flag].fillna(False).astype(bool)
            labels = labels.where(~on, labels + "+" + param_name(flag).split(".")[-1])
    if MEMORY_ENABLED in frame.columns:  # without a memory the normaliser never runs: one baseline label
        off = frame[MEMORY_ENABLED].eq(False).fillna(False).astype(bool)
        labels = labels.where(~off, NO_MEMORY)
    if OBJECTIVE in frame.columns:
        objective = frame[OBJECTIVE].astype("string").fillna(SUPERVISED)
        label_free = objective.ne(SUPERVISED)
        labels = labels.where(~label_free, objective + ":" + labels)
    return labels.astype("string")


def seeds(frame: pd.DataFrame) -> pd.Series:
    """The trial's seed: the ``seed`` column, falling back to ``config.seed``."""
    out = pd.Series(pd.NA, index=frame.index, dtype="Int64")
    for column in SEED_COLUMNS:
        if column in frame.columns:
            out = out.fillna(pd.to_numeric(frame[column], errors="coerce").astype("Int64"))
    return out


NULL_TEXT = "<null>"  # a config_key's value of a parameter the row does not have


def config_key(frame: pd.DataFrame, exclude: tuple[str, ...] = ("config.seed",)) -> pd.Series:
    """A string naming the configuration of each row: every config value except ``exclude``,
    nulls included, so rows that differ only by seed share a key (``name=value|name=value``)."""
    columns = [c for c in config_columns(frame) if c not in exclude]
    if not columns or frame.empty:
        return pd.Series("", index=frame.index, dtype="string")
    parts = frame[columns].astype("string").fillna(NULL_TEXT)
    return parts.apply(lambda row: "|".join(f"{param_name(c)}={v}" for c, v in row.items()), axis=1).astype("string")



def key_values(key: str) -> list[tuple[str, str]]:
    """The ``(parameter, value)`` pairs of a :func:`config_key`, without the parameters it marks absent."""
    return [(name, value) for name, value in (part.split("=", 1) for part in str(key).split("|") if "=" in part)
            if value != NULL_TEXT]
