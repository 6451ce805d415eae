"""DataFrames as Markdown tables."""
import math

import pandas as pd

from analysis.markdown import cell, table


def test_cells_and_table():
    assert cell(0.123456) == "0.1235" and cell(float("nan")) == "–" and cell(pd.NA) == "–"
    assert cell([1, 2]) == "1, 2" and cell("a|b") == "a\\|b" and cell(math.inf) == "inf"
    frame = pd.DataFrame({"config.memory.ratio": [0.1, 0.5, 0.9], "n": [1, 2, 3]})
    text = table(frame, max_rows=2)
    lines = text.splitlines()
    assert lines[0] == "| memory.ratio | n |" and lines[1] == "| --- | --- |"
    assert lines[2] == "| 0.1 | 1 |" and "(1 more rows not shown)" in text
