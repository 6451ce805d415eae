"""Thin matplotlib drawings of the computed results (compute first, draw second: every function
takes what ``tables``/``compare``/``curves``/``effects``/``importance`` return and draws nothing else).

matplotlib is imported lazily and figures are built as ``matplotlib.figure.Figure`` on an Agg canvas,
without pyplot: no global state, no GUI, headless anywhere; notebooks display the returned figure.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.columns import param_name

PALETTE = "tab10"


def new_figure(width: float = 7.0, height: float = 4.0, ncols: int = 1):
    """A matplotlib Figure (constrained layout, the Agg canvas: no pyplot state) and its ``ncols`` axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols)
    return fig, axes


def _colours(names) -> dict:
    from matplotlib import colormaps
    cmap = colormaps[PALETTE]
    return {name: cmap(i % cmap.N) for i, name in enumerate(sorted(dict.fromkeys(map(str, names))))}


def _integer_epochs(ax) -> None:
    """Epoch ticks at whole epochs only (matplotlib's default locator puts ticks at 1.25, 1.5, ...)."""
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


DPI = 100


def save(fig, path: str | Path, dpi: int | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi or DPI)
    return path


def png_bytes(fig, dpi: int | None = None) -> bytes:
    """The figure as PNG bytes (for storage that is not a local folder)."""
    import io
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi or DPI)
    return buffer.getvalue()


def plot_leaderboard(board: pd.DataFrame, metric: str, top: int = 15):
    """Horizontal bars of ``best_<metric>`` for the ``top`` ranked trials (from ``leaderboard``), coloured by
    variant, with a legend of the variants drawn."""
    from matplotlib.patches import Patch
    rows = board.dropna(subset=[f"best_{metric}"]).head(top).iloc[::-1]
    fig, ax = new_figure(7, 0.6 + 0.3 * max(len(rows), 1))
    colours = _colours(board["variant"])
    ax.barh(rows["trial_id"].astype(str), rows[f"best_{metric}"], color=[colours[str(v)] for v in rows["variant"]])
    shown = sorted(set(map(str, rows["variant"])))
    if shown:
        ax.legend(handles=[Patch(color=colours[v], label=v) for v in shown], fontsize=8, loc="lower right")
    ax.set_xlabel(f"best {metric}")
    ax.set_title(f"Leaderboard (top {len(rows)})")
    return fig


def _interval_plot(ax, labels, mean, low, high, colours=None):
    y = np.arange(len(labels))
    mean, low, high = (np.asarray(v, dtype=float) for v in (mean, low, high))
    err = np.vstack([mean - low, high - mean])
    for i in range(len(labels)):
        ax.errorbar(mean[i], y[i], xerr=None if np.isnan(err[:, i]).any() else err[:, [i]], fmt="o", capsize=4,
                    color=None if colours is None else colours[str(labels[i])])
    ax.set_yticks(y, [str(v) for v in labels])
    ax.invert_yaxis()


def plot_variant_comparison(comparison):
    """Mean and t-interval per variant (from ``compare_variants``)."""
    table = comparison.table
    fig, ax = new_figure(7, 0.8 + 0.45 * len(table))
    _interval_plot(ax, table["variant"], table["mean"], table["ci_low"], table["ci_high"], _colours(table["variant"]))
    for i, n in enumerate(table["n"]):
        ax.annotate(f"n={n}", (table["mean"].iloc[i], i), textcoords="offset points", xytext=(0, 7),
                    ha="center", fontsize=8)
    ax.set_xlabel(f"{comparison.value}: mean ± {comparison.confidence:.0%} t-interval over {table['unit'].iloc[0]}")
    ax.set_title(f"Variants ({comparison.stage} stage)")
    return fig


def plot_paired_differences(diffs: pd.DataFrame):
    """Mean difference ``a - b`` over matched runs with its interval (from ``paired_differences``)."""
    labels = [f"{a} − {b} (n={n})" for a, b, n in zip(diffs["a"], diffs["b"], diffs["n_pairs"])]
    fig, ax = new_figure(7, 0.8 + 0.4 * len(diffs))
    _interval_plot(ax, labels, diffs["mean_diff"], diffs["ci_low"], diffs["ci_high"])
    ax.axvline(0.0, color="grey", lw=1, ls="--")
    ax.set_xlabel("paired difference")
    ax.set_title("Paired differences between variants")
    return fig


def plot_importance(result):
    """Bars of the normalised importances (from ``importance``)."""
    table = result.table.iloc[::-1]
    fig, ax = new_figure(6, 0.8 + 0.4 * len(table))
    ax.barh(table["param"], table["importance"], color="tab:blue")
    ax.set_xlabel(f"importance ({result.evaluator}, {result.n_trials} trials)")
    ax.set_title("Parameter importance")
    return fig


def plot_learning_curves(curves: pd.DataFrame, metric: str):
    """One line per trial, coloured by variant (from ``learning_curves``)."""
    fig, ax = new_figure()
    colours = _colours(curves["variant"])
    for (_, _, variant), rows in curves.groupby(["sweep_dir", "trial_id", "variant"], sort=False):
        ax.plot(rows["epoch"], rows["value"], color=colours[str(variant)], alpha=0.6, lw=1, marker=".")
    for variant, colour in colours.items():
        ax.plot([], [], color=colour, label=variant)
    ax.legend(fontsize=8)
    ax.set_xlabel("epoch")
    _integer_epochs(ax)
    ax.set_ylabel(metric)
    ax.set_title("Learning curves")
    return fig


def plot_survival(survival):
    """Trials reaching each epoch (step line, ASHA rungs marked) and where trials ended, by status."""
    m = survival.milestones
    fig, ax = new_figure()
    ax.step(m["epoch"], m["reached"], where="mid", color="black", label="reached epoch")
    bottom = np.zeros(len(m))
    for status, colour in (("stopped_early", "tab:orange"), ("failed", "tab:red"), ("completed", "tab:green")):
        ax.bar(m["epoch"], m[status], bottom=bottom, color=colour, alpha=0.7, label=f"ended here: {status}")
        bottom += m[status].to_numpy()
    for rung in survival.rungs:
        ax.axvline(rung, color="grey", ls=":", lw=1)
    ax.set_xlabel("epoch (dotted: ASHA rungs)")
    _integer_epochs(ax)
    ax.set_ylabel("trials")
    ax.legend(fontsize=8)
    ax.set_title("ASHA survival")
    return fig


def plot_param_effect(effect):
    """Trials as points (by variant), the per-level mean as a line, and the paper's reference
    points on their own right-hand axis (from ``param_effect``)."""
    fig, ax = new_figure()
    colours = _colours(effect.points["variant"])
    for variant, rows in effect.points.groupby("variant"):
        ax.scatter(rows["x"].astype(str) if effect.categorical else rows["x"], rows["value"], s=14, alpha=0.6,
                   color=colours[str(variant)], label=str(variant))
    ax.plot(effect.summary["x"].astype(str) if effect.categorical else effect.summary["x"], effect.summary["mean"],
            color="black", lw=1.5, marker="s", label="mean per level")
    if effect.log:
        ax.set_xscale("log")
    ax.set_xlabel(param_name(effect.param))
    ax.set_ylabel(f"best {effect.metric}")
    if effect.reference is not None:
        ref = effect.reference
        twin = ax.twinx()
        twin.plot(ref.x, ref.y, color="tab:purple", ls="--", marker="D", label=ref.label)
        twin.set_ylabel(f"reference ({ref.dataset}, {ref.unit})", color="tab:purple")
        twin.legend(fontsize=7, loc="lower right")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title(f"Effect of {param_name(effect.param)}")
    return fig


def plot_heatmap(heatmap):
    """Mean metric per cell with trial counts (from ``param_heatmap``)."""
    fig, ax = new_figure(6, 5)
    values = heatmap.mean.to_numpy(dtype=float)
    image = ax.imshow(values, origin="lower", cmap="viridis", aspect="auto")
    ax.set_xticks(range(values.shape[1]), [f"{v:.3g}" for v in heatmap.mean.columns])
    ax.set_yticks(range(values.shape[0]), [f"{v:.3g}" for v in heatmap.mean.index])
    for (i, j), count in np.ndenumerate(heatmap.count.reindex_like(heatmap.mean).fillna(0).to_numpy()):
        if count:
            ax.text(j, i, f"{values[i, j]:.3f}\nn={int(count)}", ha="center", va="center", fontsize=7, color="white")
    ax.set_xlabel(param_name(heatmap.x))
    ax.set_ylabel(param_name(heatmap.y))
    fig.colorbar(image, ax=ax, label="mean")
    ax.set_title(f"{param_name(heatmap.x)} × {param_name(heatmap.y)}")
    return fig


def plot_drift_staleness(table: pd.DataFrame):
    """One panel per diagnostic, one line per variant (from ``drift_staleness``)."""
    quantities = list(dict.fromkeys(table["quantity"]))
    fig, axes = new_figure(5 * len(quantities), 4, ncols=len(quantities))
    axes = np.atleast_1d(axes)
    colours = _colours(table["variant"])
    for ax, quantity in zip(axes, quantities):
        for variant, rows in table[table["quantity"] == quantity].groupby("variant"):
            ax.plot(rows["epoch"], rows["mean"], marker=".", color=colours[str(variant)], label=str(variant))
        ax.set_xlabel("epoch")
        _integer_epochs(ax)
        ax.set_title(quantity)
        ax.legend(fontsize=8)
    return fig


def plot_parallel_coordinates(coords, metric: str):
    """One line per trial across the scaled axes, coloured by the metric (from ``parallel_coordinates``)."""
    from matplotlib import colormaps
    axes_names = [a for a in coords.axes["axis"]]
    fig, ax = new_figure(max(6, 1.6 * len(axes_names)), 4.5)
    scores = coords.scaled[metric] if metric in coords.scaled else coords.scaled[axes_names[-1]]
    cmap = colormaps["viridis"]
    x = np.arange(len(axes_names))
    for i in range(len(coords.scaled)):
        y = coords.scaled.loc[i, axes_names].to_numpy(dtype=float)
        present = ~np.isnan(y)  # a conditional parameter absent from the trial: the line skips its axis
        ax.plot(x[present], y[present], color=cmap(float(scores.iloc[i])), alpha=0.7, lw=1, marker=".")
    labels = []
    for _, a in coords.axes.iterrows():
        span = "/".join(a["categories"]) if a["kind"] == "categorical" else f"{a['low']:.3g}–{a['high']:.3g}"
        labels.append(f"{param_name(a['axis'])}\n{span}{' (log)' if a['kind'] == 'log' else ''}")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_yticks([0, 1], ["low", "high"])
    ax.set_title(f"Parallel coordinates (colour: {metric})")
    return fig


BORDER = {True: "#2ca02c", False: "#d62728", None: "#bbbbbb"}  # right, wrong, unknown


def plot_retrieval_grid(grid, tile_inches: float = 1.4):
    """A query -> top-k grid (``analysis.retrieval.RetrievalGrid``): one row per query, the query first,
    each neighbour framed green (the query's class), red (another class) or grey (unknown)."""
    from analysis.retrieval import grid_size

    rows, columns = grid_size(grid)
    fig, _ = new_figure(tile_inches * columns, tile_inches * rows + 0.4)
    fig.clear()
    axes = fig.subplots(rows, columns, squeeze=False)
    for r, (query, neighbours) in enumerate(grid.rows):
        for c in range(columns):
            ax = axes[r][c]
            ax.set_xticks([])
            ax.set_yticks([])
            tile = query if c == 0 else (neighbours[c - 1] if c - 1 < len(neighbours) else None)
            if tile is None:
                ax.set_axis_off()
                continue
            ax.imshow(tile.image, cmap="gray" if tile.image.ndim == 2 else None, vmin=0, vmax=255)
            ax.set_xlabel(tile.caption, fontsize=6)
            colour, width = ("black", 2.5) if c == 0 else (BORDER[tile.correct], 4.0)
            for spine in ax.spines.values():
                spine.set_edgecolor(colour)
                spine.set_linewidth(width)
    if grid.title:
        fig.suptitle(grid.title, fontsize=8)
    return fig


def plot_schedules(frame: pd.DataFrame):
    """One panel per mutable param: each trial's value by epoch (``analysis.schedules.schedules``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    params = list(dict.fromkeys(frame["param"]))
    fig = Figure(figsize=(7, 0.6 + 2.2 * len(params)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(params), 1, sharex=True, squeeze=False)[:, 0]
    for ax, param in zip(axes, params):
        for trial_id, rows in frame[frame["param"] == param].groupby("trial_id"):
            ax.step(rows["epoch"], rows["value"], where="post", label=str(trial_id)[-5:])
        ax.set_ylabel(param)
    axes[-1].set_xlabel("epoch")
    _integer_epochs(axes[-1])   # shared x: one locator for every panel
    axes[0].set_title("PBT schedules: each trial's mutable values by epoch")
    return fig


def plot_pareto(result):
    """Every eligible trial on the first two objectives, the front highlighted and joined (from
    ``analysis.dominance.pareto_front``); with one objective, none to draw.

    The front is joined as a staircase, the edge of what it dominates: between two neighbours on x it holds
    the value of the one that is better on x, i.e. the left one when x is minimised (``steps-post``) and the
    right one when x is maximised (``steps-pre``)."""
    x, y = result.columns[0], result.columns[1]
    fig, ax = new_figure(6, 4.5)
    points, front = result.points, result.front.sort_values(x)
    ax.scatter(points[x], points[y], s=14, color="0.7", label="trials")
    steps = "steps-post" if result.modes[0] == "min" else "steps-pre"
    ax.plot(front[x], front[y], color="C3", marker="o", ms=5, lw=1, drawstyle=steps, label="Pareto front")
    ax.set_xlabel(f"{x} ({result.modes[0]})")
    ax.set_ylabel(f"{y} ({result.modes[1]})")
    ax.set_title(f"Pareto front: {len(front)} of {len(points)} trials")
    ax.legend(fontsize=8)
    return fig
