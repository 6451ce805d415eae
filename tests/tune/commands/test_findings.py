"""``xbm-tune findings`` (tune/commands/findings.py) end to end: ``sweep findings_batch_size --smoke-test`` on a tiny
Omniglot tree, then ``findings`` on it: the verdict lines, the figure and the CSVs."""
from __future__ import annotations

import time

import pandas as pd
import pytest

from tests.xbm.data.conftest import make_drawings
from tune.cli import main


@pytest.mark.slow
def test_smoke_sweep_of_findings_batch_size_then_its_verdicts(ray_session, tmp_path, capsys):
    """Bugs caught: a findings space that cannot run (a key the trainer refuses, a smoke reduction that leaves the
    toy data set or the full grid), a sweep whose Parquet the findings cannot read (a column renamed, variants
    not told apart), or a command that writes no figure. Budget: under 3 minutes on 2 cores."""
    started = time.monotonic()
    make_drawings(tmp_path / "data", alphabets=("Alpha", "Beta", "Gamma", "Delta"), characters=4, drawers=4)
    argv = ["sweep", "findings_batch_size", "--smoke-test", "--no-dashboard", "--storage", str(tmp_path / "out"),
            "--name", "smoke", "--max-concurrent", "1", "--set", f"data_root={tmp_path / 'data'}"]
    assert main(argv) == 0
    capsys.readouterr()
    sweep = tmp_path / "out" / "smoke"
    trials = pd.read_parquet(sweep / "results" / "trials.parquet")
    assert len(trials) == 8 and set(trials["config.dataset"]) == {"omniglot"}
    assert sorted(set(trials["config.batch_size"])) == [16, 32] and sorted(set(trials["config.seed"])) == [0, 1]
    assert main(["findings", str(sweep), "--out", str(tmp_path / "f")]) == 0
    out = capsys.readouterr().out
    assert "claim: findings_batch_size" in out and "the runs' final Recall@1: " in out
    assert "(floors: raw pixels " in out and ", untrained " in out
    lines = [line for line in out.splitlines() if line.startswith("1 batch size: ")]
    assert len(lines) == 3 and all(any(o in line for o in ("REPRODUCED", "INCONCLUSIVE")) for line in lines)  # NOT REPRODUCED too
    assert "no runs" in lines[2]  # the smoke grid runs no random sampler
    curve = pd.read_csv(tmp_path / "f" / "curve.csv")
    assert set(curve["variant"]) == {"none", "xbm"} and set(curve["n"]) == {2}
    assert len(pd.read_csv(tmp_path / "f" / "verdicts.csv")) == 3
    assert (tmp_path / "f" / "findings.png").stat().st_size > 1000
    assert main(["findings", str(sweep), "--claim", "no_such_claim"]) == 2
    assert time.monotonic() - started < 180
