"""DataFrames as GitHub Markdown tables (no tabulate dependency): floats to 4 significant digits,
missing values as ``–``, ``config.`` dropped from column names."""
from __future__ import annotations

import math

import pandas as pd

from analysis.columns import param_name


def cell(value) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(cell(v) for v in value)
    if value is None or (not isinstance(value, str) and pd.api.types.is_scalar(value) and pd.isna(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(frame: pd.DataFrame, max_rows: int | None = None) -> str:
    rows = frame.head(max_rows) if max_rows else frame
    header = [param_name(str(c)) for c in rows.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for record in rows.itertuples(index=False):
        lines.append("| " + " | ".join(cell(v) for v in record) + " |")
    if max_rows and len(frame) > max_rows:
        lines.append(f"\n({len(frame) - max_rows} more rows not shown)")
    return "\n".join(lines)
