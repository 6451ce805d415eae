"""The Omniglot one-shot study's tables, figures and ``summary.md`` (``scripts/study_omniglot_oneshot.sh``), from
what the study leaves in its folder: the sweep's Parquet (``sweep/results``), the real runs' scores
(``oneshot/<variant>-s<seed>.parquet``, written by ``xbm-tune oneshot``; ``oneshot/references.csv``), the trial
ids of each refit and validation run (``exports/<variant>-s<seed>.trial`` / ``.confirm``), ``chosen.json`` and
``scorings.csv``. Pure functions to DataFrames first (:func:`study_tables`), drawing and Markdown on top.

Errors are in percent. A variant's interval is the 95% Student-t interval over its seeds
(:func:`analysis.compare.t_interval`); a paired difference is taken seed by seed against the chosen variant (the
same seeds: ``refit --seed-start``), with its own t-interval; the rank correlation is Spearman's between the
variants' mean validation error (``val_oneshot_error`` at the last epoch of their validation runs, the alphabets
held out as the sweep held them) and their mean error on the real runs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.compare import t_interval
from analysis.markdown import table
from analysis.plots import new_figure, save

METRIC = "val_oneshot_error"
# Published 20-way one-shot errors on the same 20 runs (Lake et al., Science 2015, and the runs' README), trained
# on the full 964-character background set; and the hand-written PML loop of issue 52 (242 characters, as here).
PUBLISHED = (("humans", 4.5), ("Bayesian program learning", 3.3), ("Siamese convolutional networks", 8.0),
             ("deep convolutional network", 13.5), ("modified Hausdorff distance", 38.8),
             ("hand-written PML loop (resnet18, 32 px, 242 characters, 15 epochs)", 18.0))


@dataclass
class StudyTables:
    chosen: dict
    refits: pd.DataFrame       # variant, seed, trial_id, error (mean over the 20 runs, %)
    validation: pd.DataFrame   # variant, seed, trial_id, val_oneshot_error (last epoch, %)
    variants: pd.DataFrame     # variant, n, mean, low, high (real runs), val_mean, val_n
    paired: pd.DataFrame       # variant, n, mean, low, high: variant - chosen, seed by seed
    references: pd.DataFrame   # reference, n, mean, low, high (real runs)
    leaderboard: pd.DataFrame  # the sweep's trials by best val_oneshot_error
    curves: pd.DataFrame       # trial_id, epoch, val_oneshot_error (sweep stage)
    val_references: dict       # reference_raw_oneshot_error / reference_untrained_oneshot_error on validation
    spearman: float
    scorings: int


def _runs_error(path: Path) -> float:
    return 100.0 * float(pd.read_parquet(path)["error"].mean())


def _ids(out: Path, suffix: str) -> pd.DataFrame:
    rows = []
    for path in sorted((out / "exports").glob(f"*-s*{suffix}")):
        variant, seed = path.name[: -len(suffix)].rsplit("-s", 1)
        rows.append({"variant": variant, "seed": int(seed), "trial_id": path.read_text().strip()})
    return pd.DataFrame(rows, columns=["variant", "seed", "trial_id"])


def _interval_row(values, **extra) -> dict:
    iv = t_interval(values)
    return {**extra, "n": iv.n, "mean": iv.mean, "low": iv.low, "high": iv.high}


def memory_comparison(refits: pd.DataFrame, validation: pd.DataFrame, chosen: str
                     ) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    """(per variant: n, mean, low, high of its real-run errors and ``val_mean``, ``val_n`` of its validation runs;
    per other variant: its paired difference to ``chosen`` over the seeds both have; Spearman's rank correlation
    of the variants' mean validation and real-run errors, NaN below two variants with both)."""
    order = [chosen] + sorted(set(refits["variant"]) - {chosen})
    variants = pd.DataFrame([{**_interval_row(refits.loc[refits["variant"] == v, "error"], variant=v),
                              "val_mean": validation.loc[validation["variant"] == v, METRIC].mean(),
                              "val_n": int((validation["variant"] == v).sum())} for v in order])
    base = refits[refits["variant"] == chosen].set_index("seed")["error"]
    paired = pd.DataFrame([_interval_row((refits[refits["variant"] == v].set_index("seed")["error"] - base).dropna(),
                                         variant=v) for v in order if v != chosen],
                          columns=["variant", "n", "mean", "low", "high"])
    ranked = variants.dropna(subset=["mean", "val_mean"])
    spearman = (float(ranked["mean"].rank().corr(ranked["val_mean"].rank())) if len(ranked) >= 2
                else float("nan"))
    return variants, paired, spearman


def study_tables(out: str | Path) -> StudyTables:
    """Every table of the study folder ``out`` (module docstring)."""
    from analysis import load

    out = Path(out)
    chosen = json.loads((out / "chosen.json").read_text())
    sweep = load(out / "sweep")
    epochs, trials = sweep.epochs, sweep.trials
    refits = _ids(out, ".trial")
    refits["error"] = [(_runs_error(out / "oneshot" / f"{v}-s{s}.parquet")
                        if (out / "oneshot" / f"{v}-s{s}.parquet").exists() else float("nan"))
                       for v, s in zip(refits["variant"], refits["seed"])]
    validation = _ids(out, ".confirm")
    last = epochs.sort_values("epoch").groupby("trial_id").tail(1).set_index("trial_id")
    validation[METRIC] = [float(last[METRIC].get(t, float("nan"))) for t in validation["trial_id"]]
    variants, paired, spearman = memory_comparison(refits, validation, chosen["variant"])
    references = pd.DataFrame(columns=["reference", "n", "mean", "low", "high"])
    if (out / "oneshot" / "references.csv").exists():
        ref = pd.read_csv(out / "oneshot" / "references.csv")
        references = pd.DataFrame([_interval_row(100 * g["error"], reference=k) for k, g in ref.groupby("reference")])
    stage = trials.get("stage", pd.Series("sweep", index=trials.index)).fillna("sweep")
    swept = [c for c in sweep.declared_params() if c in trials.columns]
    leaderboard = (trials[stage == "sweep"][["trial_id", "status", "epochs_completed", f"best_{METRIC}", *swept]]
                   .sort_values(f"best_{METRIC}").reset_index(drop=True))
    estage = epochs.get("stage", pd.Series("sweep", index=epochs.index)).fillna("sweep")
    curves = epochs[estage == "sweep"][["trial_id", "epoch", METRIC]].dropna()
    val_refs = {k: float(epochs[k].dropna().iloc[0]) for k in ("reference_raw_oneshot_error",
                                                              "reference_untrained_oneshot_error")
                if k in epochs and epochs[k].notna().any()}
    scorings = (len(pd.read_csv(out / "scorings.csv")) if (out / "scorings.csv").exists() else 0)
    return StudyTables(chosen, refits, validation, variants, paired, references, leaderboard, curves, val_refs,
                       spearman, scorings)


def _save(fig, ax, path: Path, xlabel: str, ylabel: str, title: str) -> Path:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return save(fig, path, dpi=110)


def plot_curves(tables: StudyTables, path: Path) -> Path:
    """Each sweep trial's val_oneshot_error per epoch, the chosen one in colour, the validation references."""
    fig, ax = new_figure(7, 4.2)
    for trial, g in tables.curves.groupby("trial_id"):
        chosen = trial == tables.chosen["trial_id"]
        ax.plot(g["epoch"], g[METRIC], color="C3" if chosen else "0.6", lw=2.2 if chosen else 0.9,
                label="chosen" if chosen else None, zorder=3 if chosen else 1)
    for key, style in (("reference_raw_oneshot_error", ":"), ("reference_untrained_oneshot_error", "--")):
        if key in tables.val_references:
            ax.axhline(tables.val_references[key], color="k", ls=style, lw=1,
                       label=key.replace("reference_", "").replace("_oneshot_error", "") + " (validation)")
    return _save(fig, ax, path, "epoch", "val_oneshot_error (%)",
                 "The sweep's trials on the held-out alphabets' one-shot episodes")


def plot_val_vs_test(tables: StudyTables, path: Path) -> Path:
    """Each refit's error on the real runs against its variant's validation run of the same seed."""
    joined = tables.refits.merge(tables.validation, on=["variant", "seed"], suffixes=("", "_val"))
    fig, ax = new_figure(5, 4.2)
    for i, (variant, g) in enumerate(joined.groupby("variant")):
        ax.scatter(g[METRIC], g["error"], label=variant, color=f"C{i}")
    return _save(fig, ax, path, "val_oneshot_error, last epoch (%)", "error on the 20 real runs (%)",
                 "Validation against test, per variant and seed")


def _fmt(row) -> str:
    if row["n"] >= 2:
        return f"{row['mean']:.2f} [{row['low']:.2f}, {row['high']:.2f}] (n={row['n']})"
    return f"{row['mean']:.2f} (n={row['n']})"


def markdown(tables: StudyTables) -> str:
    c = tables.chosen
    lines = ["# Omniglot one-shot study", "",
             f"Chosen on validation only: sweep trial `{c['trial_id']}` (variant `{c['variant']}`), "
             f"best {METRIC} {float(c[f'best_{METRIC}']):.2f}%. Its configuration: `chosen.yaml`.", "",
             "## The chosen configuration's refits on the 20 real runs (mean error over runs, %)", "",
             table(tables.refits[tables.refits["variant"] == c["variant"]]), ""]
    chosen_row = tables.variants[tables.variants["variant"] == c["variant"]]
    if len(chosen_row):
        lines += [f"Mean over seeds, 95% t-interval: **{_fmt(chosen_row.iloc[0])}**", ""]
    lines += ["## Memory comparison at the chosen configuration", "",
              "Each variant refit on every class over the same seeds and scored once on the 20 runs; `val_mean`: "
              f"its {METRIC} at the last epoch of its validation runs (the sweep's held-out alphabets).", "",
              table(tables.variants), "",
              f"Paired differences against `{c['variant']}`, seed by seed (negative: fewer errors):", "",
              table(tables.paired) if len(tables.paired) else "(none yet)", "",
              f"Rank correlation (Spearman) of the variants by validation and by the real runs: "
              f"{tables.spearman:.2f} over {int(tables.variants['val_mean'].notna().sum())} variant(s).", "",
              "## References", "",
              "On the 20 real runs:", "",
              table(tables.references) if len(tables.references) else "(none yet)",
              "", "On the validation episodes: " + ", ".join(f"{k} {v:.2f}%" for k, v in tables.val_references.items()),
              "", "Published (full 964-character background set) and the hand-written loop:", "",
              table(pd.DataFrame(PUBLISHED, columns=["method", "error (%)"])), "",
              "## The sweep", "", "![curves](curves.png)", "", "![validation against test](val_vs_test.png)", "",
              table(tables.leaderboard.head(15)), "",
              f"The 20 real runs were scored {tables.scorings} time(s) by this study (scorings.csv).", ""]
    return "\n".join(lines)


def write_summary(out: str | Path) -> Path:
    """``out/summary.md``, ``out/results/*.csv`` and the figures, from the study folder ``out``."""
    out = Path(out)
    tables = study_tables(out)
    results = out / "results"
    results.mkdir(exist_ok=True)
    for name in ("refits", "validation", "variants", "paired", "references", "leaderboard"):
        getattr(tables, name).to_csv(results / f"{name}.csv", index=False)
    tables.curves.to_csv(results / "curves.csv", index=False)
    plot_curves(tables, out / "curves.png")
    plot_val_vs_test(tables, out / "val_vs_test.png")
    path = out / "summary.md"
    path.write_text(markdown(tables))
    return path
