"""The findings figure (``analysis.findings``): the paper's values on the left, on their own axis (another data set,
backbone and budget: the shape compares, not the level), the measured curve on the right with its 95% intervals
over seeds and the floors (raw-pixel nearest neighbour, the untrained model) as dashed lines (for a claim on
another quantity, the runs' Recall@1 beside the floors as a note). Counts of valid negatives on log axes. Draws only what
``Findings`` holds; matplotlib is imported here, lazily."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.findings import Findings
from analysis.plots import new_figure, save


def _paper_x(found: Findings) -> str | None:
    """The paper table's column that is the claim's x, when its values set it (batch size, memory ratio)."""
    key = {"batch_size": "batch_size", "ratio": "memory.ratio"}.get(found.spec.x)
    return key if key in found.paper.columns else None


def _draw_paper(ax, found: Findings) -> None:
    paper, x = found.paper, _paper_x(found)
    if x is None:  # values the text states without an axis: one labelled bar each
        ax.bar(range(len(paper)), paper["value"], color="0.6")
        ax.set_xticks(range(len(paper)), [f"{r}\n{m}" for r, m in zip(paper["row"], paper["metric"])], fontsize=7)
        ax.set_ylabel(f"paper value ({paper['unit'].iloc[0]})" if len(paper) else "paper value")
        if found.spec.value == "count":   # ~1,000 against < 10: two decades apart, as the measured counts
            ax.set_yscale("log")
    else:
        for (row, dataset), part in paper.groupby(["row", "dataset"], sort=False):
            part = part.sort_values(x)
            ax.plot(part[x], part["value"], "o--", label=f"{row} ({dataset})")
        ax.set_xlabel(x)
        ax.set_ylabel("paper Recall@1 (%)")
        if x == "batch_size":
            ax.set_xscale("log", base=2)
        ax.legend(fontsize=7)
    ax.set_title(f"paper: {paper['source'].iloc[0] if len(paper) else '-'}", fontsize=9)


def _draw_measured(ax, found: Findings) -> None:
    x = found.spec.x
    for name, part in found.curve.groupby("variant", sort=True):
        part = part.sort_values(x)
        line = ax.plot(part[x], part["mean"], "o-", label=f"{name} (n={int(part['n'].min())})")[0]
        ax.fill_between(part[x], part["low"], part["high"], color=line.get_color(), alpha=0.2)
    if found.spec.value == "recall":
        for (label, value), style in zip(found.floors.items(), (":", "--")):
            if pd.notna(value):
                ax.axhline(value, color="0.3", linestyle=style, label=f"floor: {label} ({value:.1f})")
    elif found.floors:   # another quantity: the runs' Recall@1 beside the floors, as text
        ax.text(0.02, 0.02, f"the runs' final Recall@1 {found.recall:.1f}%: floors " + ", ".join(
            f"{label} {value:.1f}%" for label, value in found.floors.items()), transform=ax.transAxes, fontsize=7)
    ax.set_xlabel(x)
    ax.set_ylabel(found.spec.label)
    if x == "batch_size":
        ax.set_xscale("log", base=2)
    if found.spec.value == "count":
        ax.set_yscale("log")
    ax.set_title(f"measured ({found.claim}), mean and 95% interval over seeds", fontsize=9)
    ax.legend(fontsize=7)


def draw_findings(found: Findings, path: str | Path) -> Path:
    """Write the figure as a PNG at ``path``; returns it."""
    figure, (left, right) = new_figure(11.0, 4.2, ncols=2)
    _draw_paper(left, found)
    _draw_measured(right, found)
    return save(figure, path)
