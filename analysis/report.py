"""``xbm-tune report PATH``: ``report.md`` and PNG figures (``figures/``) written into the sweep folder.

Sections: overview (counts, read problems), leaderboard, best per kind, variant comparison with
t-intervals and paired differences, confirmation table, parameter importance, learning curves, ASHA
survival, one-parameter effects (with reference points), the paper's table (a table space's), lambda_mu x
lambda_sigma heatmap, drift and staleness, parallel coordinates, retrieval examples (the best trial's best
weights on 8 test queries and their top 5). A section the sweep cannot support is replaced by one line saying
why (``NotApplicable``); a section that fails unexpectedly says so too and the report still finishes.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable

import pandas as pd

from analysis import compare, curves, effects, importance, markdown, plots, references, schedules, tables
from analysis.columns import key_values, param_name, varying_columns
from analysis.contract import PAPER_METRICS, TRIALS_FILE
from analysis.costs import time_line
from analysis.errors import NotApplicable
from analysis.loader import Sweep, load

TOP = 10
#: the report's sections after the overview, in order: (title, the _Report method that builds it)
REPORT_SECTIONS = (("Leaderboard", "leaderboard"), ("Recall@K", "recall_at_k"), ("Best per normaliser kind", "best_per_kind"),
            ("Variant comparison", "variants"), ("Confirmation", "confirmation"), ("Refit", "refit"),
            ("Parameter importance", "importance"), ("Learning curves", "learning_curves"),
            ("ASHA survival", "survival"), ("One-parameter effects", "effects"), ("The paper's table", "paper_table"),
            ("lambda_mu × lambda_sigma", "heatmap"), ("PBT schedules", "schedules"),
            ("Drift and staleness", "drift"), ("Parallel coordinates", "parallel"),
            ("Retrieval examples", "retrieval"), ("Pareto front", "pareto"))
#: the first and the last of the report's steps (``write_report``'s ``on_step``); the sections come between
LOADING, WRITING = "loading the sweep", "writing report.md"
#: how many steps ``on_step`` hears of
STEPS = len(REPORT_SECTIONS) + 2


class ReportSectionWarning(UserWarning):
    """A report section failed for a reason other than not applying; the report notes it."""


def write_report(path: str | Path, metric: str | None = None, neighbours=None,
                 on_step: Callable[[str], None] | None = None) -> Path | str:
    """Load the sweep at ``path``, write ``<path>/report.md`` and ``<path>/figures/*.png``; return
    the report's path (a ``Path``; the URI string for remote storage). ``metric`` defaults to the
    sweep's own (``sweep.json``). ``neighbours`` embeds the best trial's test queries for the retrieval
    examples (``analysis.retrieval.NeighboursOf``; ``xbm-tune report`` passes the torch one); without it that
    section says so. ``on_step(name)`` is called as each of the report's :data:`STEPS` steps begins (loading, each
    section by its title, writing): ``xbm-tune report`` draws them as a progress bar; analysis draws nothing. An
    unreadable ``trials.parquet`` raises ValueError naming it: the report would otherwise rank trials rebuilt from
    their epoch rows as if nothing were wrong."""
    step = on_step or _no_step
    step(LOADING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read problems are listed in the report itself
        sweep = load(path)
    for problem in sweep.problems:
        if problem.unreadable and problem.path.endswith(TRIALS_FILE):
            raise ValueError(f"{problem}: restore it, or delete it to have the trials derived from their epoch rows")
    report = _Report(sweep, metric or sweep.metric, neighbours)
    text = report.render(step)
    step(WRITING)
    folder = sweep.locations[0]
    folder.write_bytes("report.md", text.encode())
    report.remove_stale_figures()
    return folder.local / "report.md" if folder.local else folder.display("report.md")


def _no_step(name: str) -> None:
    pass


class _Report:
    def __init__(self, sweep: Sweep, metric: str, neighbours=None):
        self.sweep, self.metric, self.neighbours = sweep, metric, neighbours
        self.folder = sweep.locations[0]
        self.written: set[str] = set()

    def render(self, on_step: Callable[[str], None] = _no_step) -> str:
        """report.md's text; ``on_step(title)`` as each section after the overview begins."""
        parts = self.overview()
        for title, name in REPORT_SECTIONS:
            on_step(title)
            parts += ["", f"## {title}", ""] + self.section(getattr(self, name))
        return "\n".join(parts) + "\n"

    def section(self, build) -> list[str]:
        try:
            return build()
        except NotApplicable as exc:
            return [f"_Omitted: {exc}._"]
        except Exception as exc:  # one broken section must not cost the whole report
            warnings.warn(f"report section {build.__name__} failed: {type(exc).__name__}: {exc}", ReportSectionWarning)
            return [f"_Omitted: failed ({type(exc).__name__}: {exc})._"]

    def figure(self, fig, name: str, caption: str) -> str:
        self.folder.write_bytes(f"figures/{name}.png", plots.png_bytes(fig))
        self.written.add(f"figures/{name}.png")
        return f"![{caption}](figures/{name}.png)"

    def remove_stale_figures(self) -> None:
        """figures/ belongs to the report: a figure an earlier report drew for a section that no longer
        applies would otherwise outlive it."""
        for name in self.folder.list("figures", ".png"):
            if f"figures/{name}" not in self.written:
                self.folder.delete(f"figures/{name}")

    def short(self, key: str) -> str:
        """A config key reduced to the parameters the sweep varied."""
        swept = {param_name(c) for c in varying_columns(self.sweep.stage_trials("sweep"))}
        shown = [f"{name}={markdown.cell(_number(value))}" for name, value in key_values(key) if name in swept]
        return ", ".join(shown) or key

    # ---- sections ---------------------------------------------------------------------------------
    def pareto(self) -> list[str]:
        """The non-dominated trials of a several-objective sweep (``analysis.dominance``), and their plot."""
        from analysis.dominance import pareto_front

        record = self.sweep.record
        if len(record.metrics) < 2:
            raise NotApplicable("one objective (give --metric several times for a front)")
        result = pareto_front(self.sweep.trials, record.metrics, record.modes)
        table = result.front[["trial_id", *result.columns]].head(TOP)
        lines = [f"{len(result.front)} of {len(result.points)} trials are non-dominated on "
                 + ", ".join(f"`{c}` ({m})" for c, m in zip(result.columns, result.modes)) + ".", "",
                 markdown.table(table), ""]
        return lines + [self.figure(plots.plot_pareto(result), "pareto", "Pareto front")]

    def overview(self) -> list[str]:
        s = self.sweep
        space = s.record.space
        lines = [f"# Sweep report: {s.name}", "",
                 f"- folder: `{self.folder.uri}`",
                 f"- metric: `{self.metric}` ({'higher' if s.higher_is_better(self.metric) else 'lower'} is better)"]
        if space.name:
            about = f" — {space.description}" if space.description else ""
            lines.append(f"- space: `{space.name}`{about}")
        for key in ("search", "scheduler", "num_samples", "max_epochs", "grace_period", "reduction_factor", "seed"):
            if s.option(key) is not None:
                lines.append(f"- {key}: `{s.option(key)}`")
        if len(s.trials) and "wall_time_s" in s.trials:
            hours = pd.to_numeric(s.trials["wall_time_s"], errors="coerce").sum() / 3600
            lines.append(f"- trials: {len(s.trials)}, summed trial wall time {hours:.3g} h")
        cost = time_line(s.trials)
        if cost:
            lines.append(f"- {cost}")
        lines += ["", markdown.table(tables.status_counts(s))]
        lines += self.health()
        if s.problems:
            lines += ["", f"**Read problems ({len(s.problems)})** — nothing was skipped silently:", ""]
            lines += [f"- {p}" for p in s.problems]
        return lines

    def health(self) -> list[str]:
        """Trials whose loss saw no positive pair in some epoch, or that end below raw-pixel neighbours:
        their numbers measure a broken run, not the configuration."""
        from xbm.evaluate.signals import trial_flags  # torch-free, but `import analysis` stays free of xbm

        trials = self.sweep.trials
        if trials.empty:
            return []
        def column(name):
            return trials[name] if name in trials else [None] * len(trials)
        flags = [(t, trial_flags(c, b, r)) for t, c, b, r in zip(trials["trial_id"], column("collapsed_epochs"),
                                                                  column("best_recall_at_1"),
                                                                  column("reference_raw_recall_at_1"))]
        flagged = [f"- `{t}`: {f}" for t, f in flags if f]
        if not flagged:
            return []
        return ["", f"**Unhealthy trials ({len(flagged)} of {len(trials)})**: a collapsed epoch (no positive pair in "
                "the loss) or a best Recall@1 below nearest neighbour on raw pixels; read their values with care.",
                "", *flagged]

    def leaderboard(self) -> list[str]:
        board = tables.leaderboard(self.sweep, self.metric)
        shown = board.drop(columns=[c for c in ("sweep_dir",) if c in board.columns])
        return [markdown.table(shown, TOP), "",
                self.figure(plots.plot_leaderboard(board, self.metric), "leaderboard", "leaderboard")]

    def recall_at_k(self) -> list[str]:
        """The data set's papers' K set (or ``eval_ks``), as the runs reported it, at each trial's best epoch."""
        return ["At each trial's best epoch by the sweep metric.", "",
                markdown.table(tables.recall_at_k(self.sweep, self.metric, top=TOP))]

    def best_per_kind(self) -> list[str]:
        best = tables.best_per_kind(self.sweep, self.metric)
        return [markdown.table(best.drop(columns=[c for c in ("variant", "sweep_dir") if c in best.columns]))]

    def variants(self) -> list[str]:
        comparison = compare.compare_variants(self.sweep, self.metric)
        rule = {"best_config": "each variant's best configuration run with ≥ 2 seeds; interval over its seeds",
                "pooled": "all finished trials of each variant pooled (no configuration was repeated over seeds): "
                          "the interval mixes hyperparameter spread with seed noise"}[comparison.select]
        lines = [f"Value: {comparison.value}, {comparison.stage} stage. Runs: {rule}. "
                 f"{comparison.confidence:.0%} Student-t intervals.", "",
                 markdown.table(comparison.table.drop(columns=["config"])), "",
                 self.figure(plots.plot_variant_comparison(comparison), "variants", "variant comparison")]
        if comparison.select == "best_config":
            lines += ["", "Configurations (swept values):", ""] + [
                f"- **{v}**: `{self.short(c)}`"
                for v, c in zip(comparison.table["variant"], comparison.table["config"])]
        if len(comparison.table) >= 2:
            diffs = compare.paired_differences(self.sweep, self.metric)
            lines += ["", "### Paired differences", "",
                      "Pairs share the seed (and, for pooled runs, every other config value both variants define). "
                      "`p_value`: the pair's two-sided paired t-test alone; `p_holm`: adjusted by Holm's step-down "
                      "procedure over every tested pair of this table (Holm 1979), the one to read when several "
                      "pairs are compared: `p_holm` ≤ 0.05 keeps the chance of any false difference in the table "
                      "under 5%.", "",
                      markdown.table(diffs)]
            if diffs["n_pairs"].gt(0).any():
                lines += ["", self.figure(plots.plot_paired_differences(diffs[diffs["n_pairs"] > 0]),
                                          "paired_differences", "paired differences")]
        return lines

    def confirmation(self) -> list[str]:
        if not self.sweep.has_confirm:
            raise NotApplicable("no confirm stage (run `xbm-tune confirm PATH --top K --seeds N`)")
        table = compare.confirmation_table(self.sweep, self.metric)
        _, label = compare.confirm_values(self.sweep, self.metric)
        return [f"Test value: {label}; `selection_mean`: the confirm runs' best_{self.metric}; "
                f"`sweep_best`: the same configuration's best in the sweep.", "",
                markdown.table(table.drop(columns=["config", "swept"])), "", "Configurations (swept values):", ""] + \
            [f"- **{v}**: `{self.short(c)}`" for v, c in zip(table["variant"], table["config"])]

    def refit(self) -> list[str]:
        """The refit stage (``analysis.refit``): test values per seed, their mean and t-interval."""
        from analysis.refit import refit_groups

        lines = [f"Test value: final `{self.metric}` on the held-out test classes (the last epoch: a refit has no "
                 "validation classes to select on); `train_classes`: the classes each run trained on.", ""]
        for group in refit_groups(self.sweep, self.metric):
            iv, runs = group.interval, group.frame
            about = (f"mean {iv.mean:.4f}, 95% t-interval [{iv.low:.4f}, {iv.high:.4f}] over {iv.n} completed run(s)"
                     if iv.n else "no test value: trained on every class; measure it by the data set's external "
                     "protocol (`xbm-tune export PATH --stage refit --best`, then e.g. `xbm-tune oneshot`)")
            lines += [f"- `{self.short(group.config)}` on {runs['classes'].iloc[0]} classes: {about}", "",
                      markdown.table(runs[["trial_id", "seed", "classes", "train_classes", "completed", "test"]]), ""]
        return lines

    def importance(self) -> list[str]:
        at_epoch = importance.common_epoch(self.sweep)
        result = importance.param_importance(self.sweep, self.metric, at_epoch=at_epoch)
        lines = [f"Evaluator: {result.evaluator} over {result.n_trials} trials; value: {result.value}.", "",
                 markdown.table(result.table), "",
                 self.figure(plots.plot_importance(result), "importance", "importance")]
        if result.errors:
            lines += ["", "Evaluators that failed: " + "; ".join(f"{k}: {v}" for k, v in result.errors.items())]
        if result.excluded:
            lines += ["", "Not assessed (Optuna assesses parameters present in every trial): " +
                      "; ".join(f"`{k}` ({v})" for k, v in result.excluded.items())]
        return lines

    def learning_curves(self) -> list[str]:
        frame = curves.learning_curves(self.sweep, self.metric)
        return [self.figure(plots.plot_learning_curves(frame, self.metric), "learning_curves", "learning curves")]

    def survival(self) -> list[str]:
        survival = curves.asha_survival(self.sweep)
        return [markdown.table(survival.milestones), "", "Why trials ended:", "",
                markdown.table(tables.stop_reasons(self.sweep)), "",
                self.figure(plots.plot_survival(survival), "asha_survival", "ASHA survival")]

    def effects(self) -> list[str]:
        trials = self.sweep.stage_trials("sweep")
        # two distinct values at least (a conditional parameter with one value and nulls has no curve)
        swept = [param_name(c) for c in varying_columns(trials) if pd.api.types.is_numeric_dtype(trials[c])
                 and not pd.api.types.is_bool_dtype(trials[c]) and trials[c].nunique() >= 2]
        order = [p for p in effects.CURVE_PARAMS if p in swept] + [p for p in swept if p not in effects.CURVE_PARAMS]
        lines, skipped = [], [p for p in effects.CURVE_PARAMS if p not in swept]
        for param in order:
            name = param.replace(".", "_")
            body = self.section(lambda param=param, name=name: self._effect(param, name))
            lines += [f"### {param}", ""] + body + [""]
        if skipped:
            lines.append(f"_Not swept, so omitted: {', '.join(skipped)}._")
        if not order:
            raise NotApplicable("no numeric parameter is swept")
        return lines

    def _effect(self, param: str, name: str) -> list[str]:
        effect = effects.param_effect(self.sweep, param, self.metric)
        lines = [markdown.table(effect.summary), ""]
        if effect.reference is not None:
            lines += [f"Dashed, right axis: {effect.reference.label} — shape only, not comparable in level.", "",
                      markdown.table(effect.reference.frame()[["param_value", "reference_value"]]), ""]
        return lines + [self.figure(plots.plot_param_effect(effect), f"effect_{name}", f"effect of {param}")]

    def paper_table(self) -> list[str]:
        """The table a table space reproduces (analysis.references), its cells beside the trials that ran each row."""
        frame = references.paper_comparison(self.sweep, self.metric)
        return [f"`{self.sweep.record.space.name}` reproduces {frame['table'].iloc[0]}: the paper's `{self.metric}` "
                "(%) beside the best of this sweep's trials that ran each row, x 100. The sweep selects on held-out "
                "training classes (`val_fraction`), the paper reported the test classes: compare levels with "
                "`confirm`'s test values. Notes mark where the papers disagree.", "", markdown.table(frame), ""]

    def heatmap(self) -> list[str]:
        heat = effects.param_heatmap(self.sweep, metric=self.metric)
        return ["Mean per cell:", "", markdown.table(heat.mean.reset_index()), "",
                self.figure(plots.plot_heatmap(heat), "lambda_heatmap", "lambda heatmap")]

    def schedules(self) -> list[str]:
        frame = schedules.schedules(self.sweep)
        copied = schedules.exploits(self.sweep)
        return [f"{len(copied)} exploit(s) (trial <- donor @ the donor's epoch):", "",
                markdown.table(copied), "", self.figure(plots.plot_schedules(frame), "pbt_schedules", "PBT schedules")]

    def drift(self) -> list[str]:
        table = curves.drift_staleness(self.sweep)
        lines = ["At each variant's last epoch:", "", markdown.table(_last_epoch(table)), "",
                 self.figure(plots.plot_drift_staleness(table), "drift_staleness", "drift and staleness")]
        try:   # the papers' metrics, where the trials report them
            paper = curves.drift_staleness(self.sweep, quantities=PAPER_METRICS)
        except NotApplicable:
            return lines
        return lines + ["", "The papers' metrics at each variant's last epoch (NMI; super-class among the k nearest "
                        "super-class means; drift over Δt iterations; valid negatives per iteration):", "",
                        markdown.table(_last_epoch(paper))]

    def parallel(self) -> list[str]:
        coords = effects.parallel_coordinates(self.sweep, self.metric)
        return [self.figure(plots.plot_parallel_coordinates(coords, self.metric), "parallel_coordinates",
                            "parallel coordinates")]

    def retrieval(self) -> list[str]:
        from analysis.retrieval import best_trial_grid

        if self.neighbours is None:
            raise NotApplicable("the examples embed test queries with the best trial's weights, which analysis "
                                "leaves to its caller: `xbm-tune report` draws them")
        grid = best_trial_grid(self.sweep, self.neighbours)
        return [f"{grid.title}. Borders: green, a neighbour of the query's class; red, another class.", "",
                self.figure(plots.plot_retrieval_grid(grid), "retrieval_examples", "retrieval examples")]


def _last_epoch(table):
    """Each (variant, quantity)'s row at its last epoch, by quantity then variant."""
    last = table.sort_values("epoch").groupby(["variant", "quantity"]).tail(1).sort_values(["quantity", "variant"])
    return last.reset_index(drop=True)


def _number(text: str):
    try:
        return float(text) if any(c in text for c in ".eE") else text
    except ValueError:
        return text


__all__ = ["write_report"]
