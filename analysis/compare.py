"""Variant comparison over seeds: mean ± t-interval per variant, paired differences between variants.

Which rows: the confirm stage when the sweep has one with a finished run (held-out test metric, see
``analysis.values``), otherwise the sweep's trials at ``best_<metric>``; in both, only runs that finished their epoch budget
(``analysis.values.finished``: ASHA-stopped trials ran fewer epochs and failed ones have no
comparable value, so both are left out).

Which runs stand for a variant (``select``):
- ``best_config``: each variant's best configuration (all ``config.*`` values but the seed equal) among
  those run with at least two seeds; the interval is over that configuration's seeds.
- ``pooled``: every row of the variant; the interval is over trials and so mixes hyperparameter
  spread with seed noise (the ``unit`` column says so).
- ``auto`` (default): ``best_config`` when some configuration has two seeds or more, else ``pooled``.

Interval (Student t, e.g. Montgomery, *Design and Analysis of Experiments*, 2.4):
``mean ± t_{(1+c)/2, n-1} · s / sqrt(n)``, ``s`` the sample standard deviation (ddof = 1).

Pairing rule for differences ``a - b``: two runs pair when they share ``seed`` and, with
``pooled``, also every other ``config.*`` value that both variants define (non-null in all their
rows: a conditional parameter of one kind has no counterpart in the other, and the variant columns
themselves differ by definition). With ``best_config`` each variant is one configuration chosen at its
own best, so the seed alone pairs them. Several runs with the same key on one side are averaged.
The interval and a two-sided paired t-test (``scipy.stats.ttest_1samp`` on the differences) follow.

Many pairs, one table: ``paired_differences`` tests every two variants, so among k variants' k(k-1)/2 pairs
some raw ``p_value`` falls under 0.05 by chance alone far more often than 5% of the time. Its ``p_holm`` column
is Holm's step-down adjustment (:func:`holm`; Holm 1979), the family being all pairs of that one table
that have a p-value: ``p_holm <= alpha`` rejects with a family-wise error rate of at most ``alpha``, whatever
the dependence between the pairs' tests (they share variants, so they are dependent).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.columns import KEY, KIND, VARIANT_FLAGS, config_columns, config_key, key_values, seeds, varying_columns
from analysis.errors import NotApplicable
from analysis.loader import Sweep
from analysis.values import confirm_values, finished, metric_values

SELECTIONS = ("auto", "best_config", "pooled")


@dataclass(frozen=True)
class Interval:
    n: int
    mean: float
    std: float
    sem: float
    low: float
    high: float
    confidence: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


#: the intervals' confidence, the field's convention (95%)
CONFIDENCE = 0.95


def t_interval(values, confidence: float = CONFIDENCE) -> Interval:
    """Mean and two-sided ``confidence`` t-interval of the numeric, non-missing ``values`` (NaN and
    non-numeric entries are dropped; NaN bounds below n = 2)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must satisfy 0 < confidence < 1, but got {confidence!r}")
    x = np.asarray(pd.to_numeric(pd.Series(values), errors="coerce").dropna(), dtype=float)
    n = len(x)
    mean = float(x.mean()) if n else math.nan
    if n < 2:
        return Interval(n, mean, math.nan, math.nan, math.nan, math.nan, confidence)
    std = float(x.std(ddof=1))
    sem = std / math.sqrt(n)
    from scipy import stats  # lazily: scipy.stats takes ~1 s to import, and `import analysis` should not

    half = float(stats.t.ppf((1 + confidence) / 2, n - 1)) * sem
    return Interval(n, mean, std, sem, mean - half, mean + half, confidence)


@dataclass(frozen=True)
class Rows:
    """The runs a comparison uses: one row per trial with ``variant``, ``seed``, ``config_key``,
    ``value`` and its ``config.*`` columns."""

    frame: pd.DataFrame
    stage: str
    value: str
    select: str


def comparison_rows(sweep: Sweep, metric: str | None = None, select: str = "auto") -> Rows:
    if select not in SELECTIONS:
        raise ValueError(f"select must be one of {list(SELECTIONS)}, but got {select!r}")
    metric = metric or sweep.metric
    stage, note = "sweep", ""
    if sweep.has_confirm:
        values, label = confirm_values(sweep, metric)
        trials = sweep.stage_trials("confirm")
        if (finished(trials) & values.notna()).any():
            stage = "confirm"
        else:
            note = "; the confirm stage has no finished run yet"
    if stage == "sweep":
        values = metric_values(sweep, metric, stage)
        label = f"{values.name} (sweep trials that finished their epoch budget{note})"
    trials = sweep.stage_trials(stage)
    keep = finished(trials) & values.notna()
    trials, values = trials[keep], values[keep]
    if not len(trials):
        raise NotApplicable(f"no {stage} trial has finished its epoch budget with a value of {values.name}")
    frame = trials[KEY + ["variant"] + config_columns(trials)].copy()
    frame["seed"] = seeds(trials)
    frame["config_key"] = config_key(trials)
    frame["value"] = values.astype(float)
    if select == "auto":
        per_config = frame.groupby(["variant", "config_key"])["seed"].nunique()
        select = "best_config" if (per_config >= 2).any() else "pooled"
    if select == "best_config":
        frame = _best_configs(frame, sweep.higher_is_better(metric))
    return Rows(frame, stage, label, select)


def _best_configs(frame: pd.DataFrame, higher: bool) -> pd.DataFrame:
    parts = []
    for _, rows in frame.groupby("variant", sort=True):
        summary = rows.groupby("config_key").agg(n=("seed", "nunique"), mean=("value", "mean"))
        eligible = summary[summary["n"] >= 2] if (summary["n"] >= 2).any() else summary
        best = eligible["mean"].idxmax() if higher else eligible["mean"].idxmin()
        parts.append(rows[rows["config_key"] == best])
    return pd.concat(parts)


@dataclass(frozen=True)
class VariantComparison:
    table: pd.DataFrame  # one row per variant, best first
    stage: str
    value: str
    select: str
    confidence: float


def compare_variants(sweep: Sweep, metric: str | None = None, select: str = "auto",
                     confidence: float = 0.95) -> VariantComparison:
    """Mean ± ``confidence`` t-interval of each variant (see the module docstring for the rows)."""
    rows = comparison_rows(sweep, metric, select)
    table = _variant_table(rows, sweep.higher_is_better(metric or sweep.metric), confidence)
    return VariantComparison(table, rows.stage, rows.value, rows.select, confidence)


def _variant_table(rows: Rows, higher: bool, confidence: float) -> pd.DataFrame:
    """One row per variant of ``rows``: n, mean, t-interval, seeds and configuration; best first."""
    records = []
    for variant, group in rows.frame.groupby("variant", sort=True):
        iv = t_interval(group["value"], confidence)
        chosen = group["config_key"].iloc[0] if rows.select == "best_config" else "(pooled)"
        records.append({"variant": variant, "n": iv.n, "mean": iv.mean, "std": iv.std, "sem": iv.sem,
                        "ci_low": iv.low, "ci_high": iv.high, "half_width": iv.half_width,
                        "seeds": sorted(int(s) for s in group["seed"].dropna()), "config": chosen})
    table = pd.DataFrame(records).sort_values("mean", ascending=not higher, ignore_index=True)
    table["unit"] = "seeds" if rows.select == "best_config" else "trials"
    return table


def matched_pairs(rows: Rows, a: str, b: str) -> tuple[pd.DataFrame, list[str]]:
    """Runs of variants ``a`` and ``b`` matched by the pairing rule: (``key..., value_a, value_b,
    diff``, the key columns)."""
    frame = rows.frame
    side_a, side_b = frame[frame["variant"] == a], frame[frame["variant"] == b]
    for name, side in ((a, side_a), (b, side_b)):
        if not len(side):
            raise ValueError(f"variant {name!r} has no rows; variants: {sorted(frame['variant'].unique())}")
    key = ["seed"]
    if rows.select == "pooled":
        both = pd.concat([side_a, side_b])
        skip = {"config.seed", KIND, *VARIANT_FLAGS}
        # constants are equal anyway: keeping only varying columns makes `matched_on` readable
        key += [c for c in config_columns(frame)
                if c not in skip and both[c].notna().all() and both[c].nunique() > 1]
    side_a, side_b = side_a.dropna(subset=["seed"]), side_b.dropna(subset=["seed"])
    mean_a = side_a.groupby(key, dropna=False)["value"].mean().rename("value_a")
    mean_b = side_b.groupby(key, dropna=False)["value"].mean().rename("value_b")
    pairs = pd.concat([mean_a, mean_b], axis=1, join="inner").reset_index()
    pairs["diff"] = pairs["value_a"] - pairs["value_b"]
    return pairs, key


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values (S. Holm, "A simple sequentially rejective multiple test procedure",
    *Scandinavian Journal of Statistics* 6(2), 65-70, 1979), in the order given.

    With the family's m p-values sorted, p_(1) <= ... <= p_(m):

    .. math:: \\tilde p_{(i)} = \\min\\bigl(1, \\max_{j \\le i} (m - j + 1)\\, p_{(j)}\\bigr)

    so that rejecting every hypothesis with adjusted p <= alpha is Holm's procedure at level alpha (stop at
    the first p_(i) > alpha / (m - i + 1)). The max keeps the adjusted values in the raw ones' order; ties keep
    their given order (any order gives the same values). NaN (a pair with no test: one pair, or no spread) is
    not a member of the family: it stays NaN and does not count in m. Raises ``ValueError`` for a value outside
    [0, 1]."""
    p = np.asarray(p_values, dtype=float).reshape(-1)
    outside = p[~np.isnan(p) & ((p < 0) | (p > 1))]
    if len(outside):
        raise ValueError(f"p-values must lie in [0, 1] (or be NaN for no test), but got {outside.tolist()}")
    adjusted = np.full(p.shape, math.nan)
    tested = np.flatnonzero(~np.isnan(p))
    order = tested[np.argsort(p[tested], kind="stable")]   # ascending: the smallest is judged first
    m = len(order)
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])   # (m - j + 1) p_(j), j = 1..m
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted


def paired_differences(sweep: Sweep, metric: str | None = None, select: str = "auto",
                       confidence: float = 0.95) -> pd.DataFrame:
    """For every two variants (``a`` ranked above ``b`` by ``compare_variants``): the mean of
    ``a - b`` over matched runs with its t-interval and paired t-test p-value (``p_value``), and that
    p-value adjusted by Holm's step-down procedure over all pairs of this table that have one (``p_holm``:
    :func:`holm`, Holm 1979; the module docstring says why)."""
    from scipy import stats

    rows = comparison_rows(sweep, metric, select)
    higher = sweep.higher_is_better(metric or sweep.metric)
    order = _variant_table(rows, higher, confidence)["variant"].tolist()
    records = []
    for a, b in itertools.combinations(order, 2):
        pairs, key = matched_pairs(rows, a, b)
        iv = t_interval(pairs["diff"], confidence)
        p = float(stats.ttest_1samp(pairs["diff"], 0.0).pvalue) if iv.n >= 2 and iv.std > 0 else math.nan
        records.append({"a": a, "b": b, "n_pairs": iv.n, "mean_diff": iv.mean, "std": iv.std, "ci_low": iv.low,
                        "ci_high": iv.high, "p_value": p, "matched_on": ", ".join(key)})
    columns = ["a", "b", "n_pairs", "mean_diff", "std", "ci_low", "ci_high", "p_value", "p_holm",
               "matched_on"]
    table = pd.DataFrame(records, columns=columns)
    table["p_holm"] = holm(table["p_value"])
    return table


def confirmation_table(sweep: Sweep, metric: str | None = None, confidence: float = 0.95) -> pd.DataFrame:
    """One row per confirmed configuration: its held-out test value over seeds (mean, t-interval),
    the confirm runs' own ``best_<metric>`` on the selection split, and the best value the same
    configuration reached in the sweep (matched on the parameters the sweep varied, which ``swept`` names:
    ``name=value, ...``)."""
    metric = metric or sweep.metric
    values, _ = confirm_values(sweep, metric)
    confirm = sweep.stage_trials("confirm")
    completed = finished(confirm)
    frame = pd.DataFrame({"variant": confirm["variant"], "seed": seeds(confirm), "test": values,
                          "selection": metric_values(sweep, metric, "confirm"), "completed": completed,
                          "config": config_key(confirm)})
    swept_sweep = sweep.stage_trials("sweep")
    swept = [c for c in varying_columns(swept_sweep) if c in confirm.columns]
    confirm_match = config_key(confirm[swept], exclude=())
    sweep_best = pd.Series(metric_values(sweep, metric, "sweep").to_numpy(), index=config_key(swept_sweep[swept], exclude=()))
    grouped = sweep_best.groupby(level=0)
    sweep_best = grouped.max() if sweep.higher_is_better(metric) else grouped.min()
    records = []
    for key, group in frame.groupby("config", sort=False):
        ok = group[group["completed"]]
        iv = t_interval(ok["test"], confidence)
        match = confirm_match[group.index[0]]
        records.append({"variant": group["variant"].iloc[0], "n_runs": len(group), "n_completed": len(ok),
                        "seeds": sorted(int(s) for s in ok["seed"].dropna()), "test_mean": iv.mean,
                        "test_ci_low": iv.low, "test_ci_high": iv.high, "test_std": iv.std,
                        "selection_mean": float(ok["selection"].mean()) if len(ok) else math.nan,
                        # a sweep that varied nothing ran this one configuration: all its trials match
                        "sweep_best": float(sweep_best.get(match, math.nan)),
                        "swept": ", ".join(f"{name}={value}" for name, value in key_values(match)),
                        "config": key})
    table = pd.DataFrame(records)
    return table.sort_values("test_mean", ascending=not sweep.higher_is_better(metric), ignore_index=True)

