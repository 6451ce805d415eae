"""The findings studies (``search_spaces/findings_*.yaml``, issue 53): a finished sweep turned into the measured
curve of its claim, with 95% intervals over seeds, and a verdict per testable condition stated in the space's
header before the run.

Compute first, draw second: ``trial_frame`` / ``epoch_frame`` tidy a sweep's Parquet rows (one row per trial,
or per trial and epoch; Recall@1 in percent), ``curve`` gives mean and t-interval per point, and each claim's
``verdicts_<claim>`` judges its conditions on those frames alone, so tests give it synthetic frames whose answer
is known. ``analysis.findings_plot`` draws the figure.

A condition is a linear contrast of cell means, ``q = sum_i w_i mean_i``, claimed to exceed ``threshold``. Its
interval is Welch's: ``se^2 = sum_i w_i^2 s_i^2 / n_i``, with Welch-Satterthwaite degrees of freedom
``se^4 / sum_i (w_i^2 s_i^2 / n_i)^2 / (n_i - 1)`` (cells are seeds of different configs, not paired). Judged
(``judge``): reproduced when the interval's low end is above ``threshold``; not reproduced when its high end is
at most ``threshold + negligible`` (any effect left is too small to be the paper's); inconclusive otherwise, and
whenever a cell has fewer than 2 seeds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Mapping

import numpy as np
import pandas as pd

from analysis.columns import config_column, seeds
from analysis.compare import CONFIDENCE, t_interval
from analysis.loader import Sweep
from analysis.values import finished

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
#: one point of Recall@1: a gap smaller than this is not the paper's effect (its gaps are 3 to 25 points)
NEGLIGIBLE_POINTS = 1.0
#: claim 4c: how much memory must raise the early drift (thesis §5.4: "roughly doubles")
DRIFT_RISE = 1.5


@dataclass(frozen=True)
class Verdict:
    """One condition judged: ``estimate`` of the contrast and its interval [``low``, ``high``], the rule's
    ``threshold``, the ``outcome``, and ``detail`` (the cells' means and seeds, or why it is inconclusive)."""

    claim: str
    condition: str
    estimate: float
    low: float
    high: float
    threshold: float
    outcome: str
    detail: str = ""

    def line(self) -> str:
        number = "n/a" if math.isnan(self.estimate) else f"{self.estimate:.2f} [{self.low:.2f}, {self.high:.2f}]"
        return f"{self.claim}: {self.outcome.upper()}: {self.condition}: {number} vs {self.threshold:g}. {self.detail}"


def judge(low: float, high: float, threshold: float, negligible: float) -> str:
    """The rule (module docstring); a NaN bound is inconclusive."""
    if math.isnan(low) or math.isnan(high):
        return INCONCLUSIVE
    if low > threshold:
        return REPRODUCED
    if high <= threshold + negligible:
        return NOT_REPRODUCED
    return INCONCLUSIVE


def contrast(cells: Mapping[Any, Any], weights: Mapping[Any, float],
             confidence: float = CONFIDENCE) -> tuple[float, float, float, str]:
    """(estimate, low, high, detail) of ``sum_i w_i mean(cells[i])`` with Welch's interval; NaN bounds and the
    reason in ``detail`` when a weighted cell has fewer than 2 finite values."""
    parts, variances, dfs, notes = [], [], [], []
    for key, weight in weights.items():
        x = pd.to_numeric(pd.Series(cells.get(key, []), dtype=float), errors="coerce").dropna().to_numpy()
        notes.append(f"{cell_name(key)}: {x.mean():.2f} (n={len(x)})" if len(x) else f"{cell_name(key)}: no runs")
        if len(x) < 2:
            return (float(weight * x.mean()) if len(x) and len(weights) == 1 else math.nan, math.nan, math.nan,
                    "fewer than 2 seeds in a cell; " + "; ".join(notes))
        parts.append(weight * x.mean())
        variances.append(weight ** 2 * x.var(ddof=1) / len(x))
        dfs.append(len(x) - 1)
    estimate, se = float(sum(parts)), math.sqrt(sum(variances))
    if se == 0:
        return estimate, estimate, estimate, "; ".join(notes)
    df = se ** 4 / sum(v ** 2 / d for v, d in zip(variances, dfs))
    from scipy import stats

    half = float(stats.t.ppf((1 + confidence) / 2, df)) * se
    return estimate, estimate - half, estimate + half, "; ".join(notes)


def cell_name(key: Hashable) -> str:
    """``("none", 16)`` -> ``none@16``; ``0.01`` -> ``0.01``."""
    parts = key if isinstance(key, tuple) else (key,)
    return "@".join(f"{p:g}" if isinstance(p, (int, float, np.number)) else str(p) for p in parts)


def verdict(claim: str, condition: str, cells: Mapping[Any, Any], weights: Mapping[Any, float],
            threshold: float = 0.0, negligible: float = NEGLIGIBLE_POINTS) -> Verdict:
    estimate, low, high, detail = contrast(cells, weights)
    return Verdict(claim, condition, estimate, low, high, threshold, judge(low, high, threshold, negligible), detail)


# ---- tidy frames from a sweep ---------------------------------------------------------------------------
def variant_of(frame: pd.DataFrame) -> pd.Series:
    """``none`` (no memory), ``xbm`` (memory, normaliser none), ``xbn`` (or another normaliser's name), with
    ``+random`` under the random-shuffle sampler."""
    def column(name: str, default: Any) -> pd.Series:
        col = config_column(name)
        return frame[col] if col in frame.columns else pd.Series(default, index=frame.index)
    kind = column("normaliser.kind", "none").astype("string").fillna("none").replace("none", "xbm")
    enabled = column("memory.enabled", True).fillna(True).astype(bool)
    label = kind.where(enabled, "none")
    random = column("sampler", "m_per_class").astype("string").eq("random").fillna(False).astype(bool)
    return label.where(~random, label + "+random").astype(str)


def trial_frame(sweep: Sweep, stage: str = "sweep") -> pd.DataFrame:
    """One row per finished trial: ``variant``, ``batch_size``, ``ratio`` (0 without memory), ``seed``, ``recall``
    (its final Recall@1 on the held-out alphabets, in percent), ``raw`` and ``untrained`` (the floors, in percent),
    ``trial``. Trials that repeat a (variant, batch, ratio, seed) point are counted once: sweeps read together may
    share points, and a sweep from before conditional grids ran no memory under each normaliser."""
    trials = sweep.stage_trials(stage)
    trials = trials[finished(trials)]
    out = pd.DataFrame({"variant": variant_of(trials), "trial": trials["trial_id"].astype(str),
                        "batch_size": pd.to_numeric(trials.get(config_column("batch_size")), errors="coerce"),
                        "seed": seeds(trials).astype("float")}, index=trials.index)
    ratio = pd.to_numeric(trials.get(config_column("memory.ratio"), np.nan), errors="coerce")
    out["ratio"] = np.where(out["variant"].str.startswith("none"), 0.0, ratio)
    out["recall"] = 100 * pd.to_numeric(trials.get("final_recall_at_1", np.nan), errors="coerce")
    out["raw"] = 100 * pd.to_numeric(trials.get("reference_raw_recall_at_1", np.nan), errors="coerce")
    untrained = _last_per_trial(sweep.stage_epochs(stage), "reference_untrained_recall_at_1")
    out["untrained"] = 100 * out["trial"].map(untrained).astype(float)
    return out.drop_duplicates(["variant", "batch_size", "ratio", "seed"]).reset_index(drop=True)


def _last_per_trial(epochs: pd.DataFrame, column: str) -> pd.Series:
    if column not in epochs.columns or epochs.empty:
        return pd.Series(dtype=float)
    rows = epochs.dropna(subset=[column]).sort_values("epoch")
    return rows.groupby(rows["trial_id"].astype(str))[column].last()


EPOCH_VALUES = ("valid_neg_memory", "valid_neg_batch", "drift_mean", "recall_at_1")


def epoch_frame(sweep: Sweep, stage: str = "sweep") -> pd.DataFrame:
    """One row per (finished trial, epoch): ``trial``, ``variant``, ``seed``, ``epoch``, ``lr_step``,
    ``memory_start`` (the memory's first epoch, 1-based) and ``EPOCH_VALUES`` (NaN where not reported)."""
    kept = set(trial_frame(sweep, stage)["trial"])
    epochs = sweep.stage_epochs(stage)
    epochs = epochs[epochs["trial_id"].astype(str).isin(kept)]
    out = pd.DataFrame({"trial": epochs["trial_id"].astype(str), "variant": variant_of(epochs),
                        "seed": seeds(epochs).astype("float"), "epoch": pd.to_numeric(epochs["epoch"])})
    out["lr_step"] = pd.to_numeric(epochs.get(config_column("lr_step"), np.nan), errors="coerce")
    start = pd.to_numeric(epochs.get(config_column("memory.start_epoch"), 0), errors="coerce")
    out["memory_start"] = pd.Series(start, index=epochs.index).fillna(0) + 1
    for name in EPOCH_VALUES:
        out[name] = pd.to_numeric(epochs.get(name, np.nan), errors="coerce")
    return out.sort_values(["trial", "epoch"]).reset_index(drop=True)


def curve(frame: pd.DataFrame, x: str, value: str, by: str = "variant") -> pd.DataFrame:
    """Mean and 95% t-interval of ``value`` over the rows (seeds) of each (``by``, ``x``) point that has one (drift
    has none in the first epoch: no point there, rather than a point of n = 0)."""
    rows = []
    for (group, point), part in frame.dropna(subset=[x, value]).groupby([by, x], sort=True):
        interval = t_interval(part[value], CONFIDENCE)
        rows.append({by: group, x: point, "n": interval.n, "mean": interval.mean, "low": interval.low,
                     "high": interval.high})
    return pd.DataFrame(rows, columns=[by, x, "n", "mean", "low", "high"])


def cells(frame: pd.DataFrame, keys: tuple[str, ...], value: str) -> dict[Any, list[float]]:
    """``{key tuple (or the one key): [value per seed]}`` for ``contrast``."""
    out = {}
    for key, part in frame.groupby(list(keys)):
        key = key if len(keys) > 1 else (key[0] if isinstance(key, tuple) else key)
        out[key] = part[value].tolist()
    return out


def floors(trials: pd.DataFrame) -> dict[str, float]:
    """The trivial references: raw-pixel nearest neighbour and the untrained model (Recall@1, percent)."""
    return {"raw pixels": float(trials["raw"].mean()), "untrained": float(trials["untrained"].mean())}


def runs_recall(trials: pd.DataFrame) -> float:
    """The runs' mean final Recall@1 (percent): set beside the floors for every claim, those whose curve is not
    Recall@1 too (a study whose runs learn less than raw pixels has a bug to chase, not a finding)."""
    return float(trials["recall"].mean()) if len(trials) else math.nan


# ---- the claims ----------------------------------------------------------------------------------------
def verdicts_batch_size(trials: pd.DataFrame) -> list[Verdict]:
    """Claim 1 (XBM paper §4.3, Fig. 6): the gain from the smallest batch to the largest is smaller with memory
    than without; memory at the smallest batch beats no memory at the largest; memory helps under the random
    sampler too. In points of Recall@1, each by more than its interval."""
    claim, c = "1 batch size", cells(trials, ("variant", "batch_size"), "recall")
    sizes = sorted(trials["batch_size"].dropna().unique())
    small, large = (sizes[0], sizes[-1]) if sizes else (math.nan, math.nan)
    return [verdict(claim, f"gain {small:g}->{large:g} without memory minus gain with XBM > 0", c,
                    {("none", large): 1, ("none", small): -1, ("xbm", large): -1, ("xbm", small): 1}),
            verdict(claim, f"XBM at batch {small:g} minus no memory at batch {large:g} > 0", c,
                    {("xbm", small): 1, ("none", large): -1}),
            verdict(claim, f"XBM minus no memory at batch {small:g}, both under sampler random > 0", c,
                    {("xbm+random", small): 1, ("none+random", small): -1})]


def verdicts_memory_ratio(trials: pd.DataFrame) -> list[Verdict]:
    """Claim 2 (XBM paper §4.3, Fig. 1 right): ratio 0.01 gives more than half the gain of ratio 1.0 over ratio 0
    (``r(0.01) - (r(0) + r(1)) / 2 > 0``); and it saturates: ratio 0.2 is within a point of ratio 1.0
    (``r(0.2) - r(1) > -1``, judged with no further margin)."""
    claim = "2 memory ratio"
    plain = trials[trials["variant"].isin(["none", "xbm"])]
    c = cells(plain, ("ratio",), "recall")
    return [verdict(claim, "r(0.01) - (r(0) + r(1.0)) / 2 > 0: 1% already gives most of the gain", c,
                    {0.01: 1, 0.0: -0.5, 1.0: -0.5}),
            verdict(claim, "r(0.2) - r(1.0) > -1 point: saturated at a moderate ratio", c, {0.2: 1, 1.0: -1},
                    threshold=-NEGLIGIBLE_POINTS, negligible=0.0)]


def _per_trial(epochs: pd.DataFrame, value: Callable[[pd.DataFrame], float]) -> list[float]:
    return [value(part) for _, part in epochs.groupby("trial")]


def _memory_rows(part: pd.DataFrame) -> pd.DataFrame:
    return part[part["epoch"] >= part["memory_start"]]


def verdicts_valid_negatives(epochs: pd.DataFrame) -> list[Verdict]:
    """Claim 3 (XBM paper §3.3, Fig. 4): with memory, log10(valid negatives from the memory / from the batch) per
    iteration, averaged over a trial's memory epochs, exceeds 1 (ten times: the paper's ~1000 vs < 10 is a
    hundred); the batch's count falls from the memory's first epoch to the last (first minus last > 0)."""
    claim, memory = "3 valid negatives", epochs[~epochs["variant"].str.startswith("none")]

    def log_ratio(part: pd.DataFrame) -> float:
        rows = _memory_rows(part)
        return float(np.log10(rows["valid_neg_memory"].mean() / max(rows["valid_neg_batch"].mean(), 1e-9)))

    def fall(part: pd.DataFrame) -> float:
        rows = _memory_rows(part).dropna(subset=["valid_neg_batch"])
        return float(rows["valid_neg_batch"].iloc[0] - rows["valid_neg_batch"].iloc[-1]) if len(rows) > 1 else np.nan
    return [verdict(claim, "log10(memory / batch valid negatives) > 1", {"memory": _per_trial(memory, log_ratio)},
                    {"memory": 1}, threshold=1.0, negligible=0.0),
            verdict(claim, "batch valid negatives, first memory epoch minus last > 0",
                    {"memory": _per_trial(memory, fall)}, {"memory": 1}, negligible=0.0)]


def verdicts_drift(trials: pd.DataFrame, epochs: pd.DataFrame) -> list[Verdict]:
    """Claim 4 (thesis §5.4.1-5.4.2, Figs. 5.1, 5.4; XBM paper Fig. 3): without memory, drift falls from the
    first epoch to the last and at each learning-rate decay (the epoch before a decay minus the one after, averaged
    over decays); memory raises the drift in its first epoch by more than half (log10 of XBM's over no memory's >
    log10 1.5: the thesis's "roughly doubles", with room below 2 for a claim read off a figure); XBM beats no memory
    in Recall@1; XBN is within a point of XBM or better."""
    claim, none = "4 drift", epochs[epochs["variant"] == "none"]

    def fall(part: pd.DataFrame) -> float:
        d = part.dropna(subset=["drift_mean"])["drift_mean"]
        return float(d.iloc[0] - d.iloc[-1]) if len(d) > 1 else np.nan

    def decay_drop(part: pd.DataFrame) -> float:
        drift = part.set_index("epoch")["drift_mean"]
        step = part["lr_step"].iloc[0]
        if not np.isfinite(step) or drift.dropna().empty:
            return np.nan
        decays = [e for e in range(int(step), int(drift.index.max())) if step > 0 and e % int(step) == 0]
        return float(np.nanmean([drift.get(e, np.nan) - drift.get(e + 1, np.nan) for e in decays])) \
            if decays else np.nan

    def early(part: pd.DataFrame) -> float:
        start = epochs["memory_start"].max()
        return float(np.log10(part.loc[part["epoch"] == start, "drift_mean"].mean()))
    first = {v: _per_trial(epochs[epochs["variant"] == v], early) for v in ("none", "xbm")}
    c = cells(trials, ("variant",), "recall")
    return [verdict(claim, "drift without memory, first epoch minus last > 0", {"none": _per_trial(none, fall)},
                    {"none": 1}, negligible=0.0),
            verdict(claim, "drift without memory, epoch before an LR decay minus the one after > 0",
                    {"none": _per_trial(none, decay_drop)}, {"none": 1}, negligible=0.0),
            verdict(claim, "log10(drift XBM / no memory) in the memory's first epoch > log10 1.5 (roughly doubles)",
                    first, {"xbm": 1, "none": -1}, threshold=math.log10(DRIFT_RISE), negligible=0.0),
            verdict(claim, "Recall@1 XBM minus no memory > 0", c, {"xbm": 1, "none": -1}),
            verdict(claim, "Recall@1 XBN minus XBM > -1 point", c, {"xbn": 1, "xbm": -1},
                    threshold=-NEGLIGIBLE_POINTS, negligible=0.0)]


# ---- a sweep's findings ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Claim:
    """How a findings space's sweep is read: the curve's ``x`` and ``value`` columns (of the trial frame, or of
    the epoch frame when ``per_epoch``), the axis ``label``, and its verdicts."""

    x: str
    value: str
    label: str
    per_epoch: bool
    judge: Callable[[pd.DataFrame, pd.DataFrame], list[Verdict]]


CLAIMS: dict[str, Claim] = {
    "findings_batch_size": Claim("batch_size", "recall", "Recall@1 (%)", False,
                                 lambda trials, epochs: verdicts_batch_size(trials)),
    "findings_memory_ratio": Claim("ratio", "recall", "Recall@1 (%)", False,
                                   lambda trials, epochs: verdicts_memory_ratio(trials)),
    "findings_valid_negatives": Claim("epoch", "count", "valid negatives per iteration", True,
                                      lambda trials, epochs: verdicts_valid_negatives(epochs)),
    "findings_drift": Claim("epoch", "drift_mean", "drift between epochs (mean L2)", True, verdicts_drift),
}


@dataclass(frozen=True)
class Findings:
    """A sweep's claim: the measured ``curve`` (``variant``/series, x, n, mean, low, high), the ``floors`` and the
    runs' own final Recall@1 (``recall``, percent), the ``paper``'s values (``analysis.references.FINDINGS``) and
    the ``verdicts``."""

    claim: str
    spec: Claim
    curve: pd.DataFrame
    floors: dict[str, float]
    paper: pd.DataFrame
    verdicts: list[Verdict]
    recall: float = math.nan


def claim_curve(spec: Claim, trials: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    if spec.value == "count":  # the two sources of valid negatives, from the runs with memory, in its epochs
        memory = epochs[~epochs["variant"].str.startswith("none") & (epochs["epoch"] >= epochs["memory_start"])]
        long = memory.melt(["trial", "epoch"], ["valid_neg_memory", "valid_neg_batch"], "variant", "count")
        return curve(long, "epoch", "count")
    return curve(epochs if spec.per_epoch else trials, spec.x, spec.value)


def findings(trials: pd.DataFrame, epochs: pd.DataFrame, claim: str) -> Findings:
    """The claim's curve, floors, paper values and verdicts from the tidy frames (``trial_frame``,
    ``epoch_frame``). ValueError for a name that is not a findings claim."""
    from analysis.references import FINDINGS, PaperValue

    if claim not in CLAIMS:
        raise ValueError(f"claim must be one of {list(CLAIMS)} (a findings space's name), but got {claim!r}")
    spec = CLAIMS[claim]
    cells_: tuple[PaperValue, ...] = FINDINGS[claim]
    paper = pd.DataFrame([{"row": c.row, "dataset": c.dataset, "metric": c.metric, "value": c.value, "unit": c.unit,
                           **dict(c.setting), "source": c.table, "note": c.note} for c in cells_])
    floor = floors(trials) if len(trials) else {}
    return Findings(claim, spec, claim_curve(spec, trials, epochs), floor, paper, spec.judge(trials, epochs),
                    runs_recall(trials))


def sweep_findings(sweep: Sweep, claim: str | None = None) -> Findings:
    """``findings`` of a loaded sweep (several folders may be loaded together, e.g. a ratio sweep and its
    no-memory runs); ``claim`` defaults to the first folder's space name."""
    return findings(trial_frame(sweep), epoch_frame(sweep), claim or str(sweep.record.space.name))
