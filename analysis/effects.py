"""How the metric moves with the swept parameters: one-parameter effects (with the seed papers'
reference points where known), the lambda_mu x lambda_sigma heatmap, Kalman r, delay and memory-ratio
curves, parallel coordinates.

Each trial counts once, at ``best_<metric>``; failed trials are left out (their last value is not a
result), ASHA-stopped trials stay in (being stopped early is part of a setting's effect).
A numeric parameter is grouped by value when it is discrete (``discrete``: a declared grid, choice or
int, or few values that repeat); otherwise into ``bins`` equal-width bins (in log10 space when
``log``), centred at their midpoint (geometric midpoint when ``log``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.columns import config_column, param_name, varying_columns
from analysis.errors import NotApplicable
from analysis.loader import Sweep
from analysis.references import Reference, reference_for
from analysis.values import metric_values

LOG_PARAMS = ("config.normaliser.kalman_r", "config.memory.ratio", "config.lr", "config.weight_decay",
              "config.normaliser.kalman_q")
# The curves the report draws first, when swept: lambdas, Kalman r, delay, memory ratio.
CURVE_PARAMS = ("normaliser.lambda_mu", "normaliser.lambda_sigma", "normaliser.kalman_r",
                "normaliser.delay_epochs", "memory.ratio", "miner.pos_margin", "miner.neg_margin", "batch_size")


@dataclass(frozen=True)
class ParamEffect:
    param: str
    metric: str
    points: pd.DataFrame  # trial_id, variant, status, x, value
    summary: pd.DataFrame  # x, x_low, x_high, n, mean, std, best
    reference: Reference | None
    log: bool
    categorical: bool


def _points(sweep: Sweep, param: str, metric: str | None, stage: str) -> tuple[str, pd.DataFrame]:
    column = config_column(param)
    metric = metric or sweep.metric
    trials = sweep.stage_trials(stage)
    if column not in trials.columns:
        raise NotApplicable(f"{param_name(column)} is not a config column of this sweep")
    frame = trials[["trial_id", "variant", "status"]].copy()
    frame["x"] = trials[column]
    frame["value"] = metric_values(sweep, metric, stage)
    frame = frame[(frame["status"] != "failed").fillna(True) & frame["x"].notna() & frame["value"].notna()]
    distinct = frame["x"].nunique()
    if distinct < 2:
        raise NotApplicable(f"{param_name(column)} is not swept "
                            f"(trials with a value show {distinct} distinct value(s))")
    return column, frame.reset_index(drop=True)


def is_log_scale(column: str, x: pd.Series, log: bool | None, declared: dict[str, bool] | None = None) -> bool:
    """``log`` when given; else what the space declared (``loguniform``, from sweep.json); else log
    for the usual log-scale parameters (``LOG_PARAMS``) or positive values spanning two decades."""
    if log is not None:
        return log
    low, high = float(x.min()), float(x.max())
    if low <= 0:
        return False
    if declared and column in declared:
        return declared[column]
    return column in LOG_PARAMS or high / low >= 100


def discrete(sweep: Sweep, column: str, x: pd.Series, max_levels: int) -> bool:
    """Group by value when the space declares a ``grid``/``choice``/``int`` with at most
    ``4 * max_levels`` values, or the values repeat as a grid's do (at most ``max_levels`` distinct
    values, each seen twice on average); continuous samples are binned."""
    spec = sweep.declared_params().get(column) or {}
    distinct = x.nunique()
    if any(k in spec for k in ("grid", "choice", "int")) and distinct <= 4 * max_levels:
        return True
    return distinct <= max_levels and 2 * distinct <= len(x)


def _level(x: pd.Series, log: bool, exact: bool, bins: int) -> tuple[pd.Series, pd.Series, pd.Series]:
    """(level centre, level low, level high) per row."""
    x = x.astype(float)
    if exact or x.nunique() == 1:
        return x, x, x
    t = np.log10(x) if log else x
    edges = np.linspace(t.min(), t.max(), bins + 1)
    index = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
    low, high = edges[index], edges[index + 1]
    if log:
        low, high = 10 ** low, 10 ** high
        return pd.Series(np.sqrt(low * high), x.index), pd.Series(low, x.index), pd.Series(high, x.index)
    return pd.Series((low + high) / 2, x.index), pd.Series(low, x.index), pd.Series(high, x.index)


def param_effect(sweep: Sweep, param: str, metric: str | None = None, stage: str = "sweep",
                 max_levels: int = 12, bins: int = 8, log: bool | None = None) -> ParamEffect:
    """The metric against one parameter: every trial as a point and a per-level summary."""
    metric = metric or sweep.metric
    column, points = _points(sweep, param, metric, stage)
    higher = sweep.higher_is_better(metric)
    categorical = not pd.api.types.is_numeric_dtype(points["x"]) or pd.api.types.is_bool_dtype(points["x"])
    if categorical:
        points["x"] = points["x"].astype("string")
        centre = low = high = points["x"]
        is_log = False
    else:
        points["x"] = points["x"].astype(float)
        is_log = is_log_scale(column, points["x"], log, sweep.declared_log_scale())
        exact = discrete(sweep, column, points["x"], max_levels)
        centre, low, high = _level(points["x"], is_log, exact, bins)
    grouped = points.assign(level=centre, x_low=low, x_high=high).groupby("level", sort=True)
    summary = grouped.agg(x_low=("x_low", "first"), x_high=("x_high", "first"), n=("value", "size"),
                          mean=("value", "mean"), std=("value", "std"),
                          best=("value", "max" if higher else "min"))
    summary = summary.rename_axis("x").reset_index()
    return ParamEffect(column, metric, points, summary, reference_for(column), is_log, categorical)


def kalman_r_curve(sweep: Sweep, metric: str | None = None, stage: str = "sweep") -> ParamEffect:
    """AXBN's measurement noise r (AXBN paper §3.2), on a log axis."""
    return param_effect(sweep, "normaliser.kalman_r", metric, stage, log=True)


def delay_curve(sweep: Sweep, metric: str | None = None, stage: str = "sweep") -> ParamEffect:
    """Adaptation delay tau in epochs (thesis Tables 5.6, SOP, In-Shop, DeepFashion2, and 5.7, CIFAR)."""
    return param_effect(sweep, "normaliser.delay_epochs", metric, stage, log=False)


def memory_ratio_curve(sweep: Sweep, metric: str | None = None, stage: str = "sweep") -> ParamEffect:
    """Memory size as a share of the training set (XBM paper Fig. 1 right), on a log axis."""
    return param_effect(sweep, "memory.ratio", metric, stage, log=True)


@dataclass(frozen=True)
class Heatmap:
    x: str
    y: str
    mean: pd.DataFrame  # index: y levels, columns: x levels
    count: pd.DataFrame


def param_heatmap(sweep: Sweep, x: str = "normaliser.lambda_mu", y: str = "normaliser.lambda_sigma",
                  metric: str | None = None, stage: str = "sweep", max_levels: int = 12, bins: int = 5) -> Heatmap:
    """Mean metric over trials in each (x, y) cell (thesis Table 5.14's lambda grid by default)."""
    x_col, points = _points(sweep, x, metric, stage)
    y_col, y_points = _points(sweep, y, metric, stage)
    both = points.merge(y_points[["trial_id", "x"]].rename(columns={"x": "y"}), on="trial_id")
    if not len(both):
        raise NotApplicable(f"no trial has both {param_name(x_col)} and {param_name(y_col)}")
    for name, column in (("x", x_col), ("y", y_col)):
        log = is_log_scale(column, both[name], None, sweep.declared_log_scale())
        exact = discrete(sweep, column, both[name], max_levels)
        both[name] = _level(both[name].astype(float), log, exact, bins)[0]
    mean = both.pivot_table(index="y", columns="x", values="value", aggfunc="mean")
    count = both.pivot_table(index="y", columns="x", values="value", aggfunc="size").fillna(0).astype(int)
    return Heatmap(x_col, y_col, mean, count)


@dataclass(frozen=True)
class ParallelCoordinates:
    scaled: pd.DataFrame  # one row per trial, one column per axis, values in [0, 1] (NaN: absent)
    axes: pd.DataFrame  # axis, kind (linear, log, categorical), low, high, categories


def parallel_coordinates(sweep: Sweep, metric: str | None = None, stage: str = "sweep",
                         params: list[str] | None = None) -> ParallelCoordinates:
    """Every non-failed trial as a line through the swept parameters and the metric, each axis
    scaled to [0, 1] (log10 for log parameters, category codes for strings and booleans)."""
    metric = metric or sweep.metric
    trials = sweep.stage_trials(stage)
    columns = [config_column(p) for p in params] if params else varying_columns(trials)
    if not columns:
        raise NotApplicable("no parameter varies across the trials")
    value = metric_values(sweep, metric, stage)
    keep = (trials["status"] != "failed").fillna(True) & value.notna()
    if keep.sum() < 2:
        raise NotApplicable("fewer than two trials with a value")
    raw = trials.loc[keep, columns].copy()
    raw[metric] = value[keep]
    scaled, axes = pd.DataFrame(index=raw.index), []
    for column in raw.columns:
        values = raw[column]
        if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            categories = sorted(values.dropna().astype(str).unique())
            codes = values.astype("string").map({c: i for i, c in enumerate(categories)})
            scaled[column] = codes.astype(float) / max(len(categories) - 1, 1)
            axes.append({"axis": column, "kind": "categorical", "low": 0.0, "high": 1.0, "categories": categories})
            continue
        values = values.astype(float)
        is_log = column != metric and values.notna().any() and \
            is_log_scale(column, values.dropna(), None, sweep.declared_log_scale())
        t = np.log10(values) if is_log else values
        low, high = float(t.min()), float(t.max())
        scaled[column] = (t - low) / (high - low) if high > low else 0.5
        axes.append({"axis": column, "kind": "log" if is_log else "linear",
                     "low": float(values.min()), "high": float(values.max()), "categories": None})
    scaled.insert(0, "trial_id", trials.loc[keep, "trial_id"])
    return ParallelCoordinates(scaled.reset_index(drop=True), pd.DataFrame(axes))
