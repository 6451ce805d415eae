"""scripts/study_omniglot_oneshot.sh at a tiny budget: the sweep, the choice, refits scored on (fixture) runs, the
validation runs, the references and summary.md, then a rerun that resumes without running anything again."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.xbm.data.conftest import make_drawings
from tests.xbm.evaluate.oneshot_fixture import two_runs, zip_runs

REPO = Path(__file__).resolve().parents[2]
SPACE = """description: the study's test (a tiny Omniglot tree, an mlp on 16 px)
base: {dataset: omniglot, model: mlp, image_size: 16, embedding_size: 8, epochs: 2, warmup_epochs: 0,
       batch_size: 8, samples_per_class: 4, device: cpu, num_workers: 0, val_fraction: 0.5,
       val_by: superclass, train_on: all, oneshot_episodes: 4, eval_nmi: false}
params:
  lr: {grid: [1.0e-3]}
"""


@pytest.mark.slow
def test_the_study_runs_end_to_end_and_resumes(tmp_path):
    """Bug caught: the study script that stops working (a command or flag it calls renamed, a trial it cannot find
    after a refit, a summary that cannot read what the steps wrote), or that reruns finished steps when resumed."""
    make_drawings(tmp_path / "data", alphabets=("Alpha", "Beta", "Gamma", "Delta"), characters=4, drawers=4)
    two_runs(tmp_path / "runs")
    runs = zip_runs(tmp_path / "runs", tmp_path / "all_runs.zip")
    (tmp_path / "space.yaml").write_text(SPACE)
    out = tmp_path / "study"
    command = ["bash", str(REPO / "scripts" / "study_omniglot_oneshot.sh"), str(out), "--budget", "2", "--seeds", "1",
               "--data", str(tmp_path / "data"), "--runs", str(runs), "--space", str(tmp_path / "space.yaml"),
               "--variants", "xbm,none", "--sweep-arg=--num-samples", "--sweep-arg=1",
               "--sweep-arg=--max-concurrent", "--sweep-arg=1"]
    env = {"XBM_PYTHON": sys.executable, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    chosen = json.loads((out / "chosen.json").read_text())
    assert chosen["variant"] == "xbm" and chosen["config"]["train_on"] == "all"
    assert chosen["config"]["val_fraction"] == 0.0 and "seed" not in chosen["config"]
    assert (out / "chosen.yaml").read_text().startswith("# The Omniglot one-shot study's choice")
    refits = pd.read_csv(out / "results" / "refits.csv")
    assert sorted(refits["variant"]) == ["none", "xbm"] and refits["seed"].tolist() == [1, 1]
    assert refits["error"].between(0, 100).all()
    assert pd.read_csv(out / "results" / "validation.csv")["val_oneshot_error"].between(0, 100).all()
    scorings = pd.read_csv(out / "scorings.csv")
    assert len(scorings) == 4   # two refits, the two references
    summary = (out / "summary.md").read_text()
    assert "## Memory comparison" in summary and "scored 4 time(s)" in summary
    # the rerun resumes: nothing runs again, nothing is scored again
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "xbm-tune" not in again.stdout.replace("[study]", "").split("chosen:")[1]
    assert len(pd.read_csv(out / "scorings.csv")) == 4
    assert len(json.loads((out / "study.json").read_text())["invocations"]) == 2
