"""scripts/study_omniglot_oneshot.sh at a tiny budget: the sweep, the choice, a refit scored on (fixture) runs, the
validation run, the references and summary.md, then a rerun that resumes without running anything again; and the
--set arguments that make each variant of the memory comparison from the choice."""
from __future__ import annotations

import importlib.util
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


def study_module():
    spec = importlib.util.spec_from_file_location("study_omniglot_oneshot", REPO / "scripts" / "study_omniglot_oneshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_variant_of_the_memory_comparison_is_the_choice_with_its_memory_changed():
    """Bug caught: a variant that trains the chosen configuration again (no --set, or one the config ignores), the
    no-memory variant keeping its memory, or memory switched on at the chosen ratio of a choice that had none."""
    study = study_module()
    xbm = {"variant": "xbm", "config": {"memory.enabled": True, "memory.ratio": 0.3, "normaliser.kind": "none"}}
    assert study.variant_sets(xbm, "xbm") == []
    assert study.variant_sets(xbm, "none") == ["--set=memory.enabled=false"]
    assert study.variant_sets(xbm, "pcxbn") == ["--set=memory.enabled=true", "--set=normaliser.kind=pcxbn"]
    none = {"variant": "none", "config": {"memory.enabled": False, "normaliser.kind": "none"}}
    assert study.variant_sets(none, "xbn") == ["--set=memory.enabled=true", "--set=normaliser.kind=xbn",
                                               "--set=memory.ratio=1.0"]
    assert [study.variant_of(c) for c in ({"memory.enabled": False, "normaliser.kind": "xbn"},
                                          {"normaliser.kind": "none"}, {"normaliser.kind": "pcxbn"})] == \
        ["none", "xbm", "pcxbn"]


@pytest.mark.slow
def test_the_study_runs_end_to_end_and_resumes(tmp_path):
    """Bug caught: the study script that stops working (a command or flag it calls renamed, a trial it cannot find
    after a refit, a summary that cannot read what the steps wrote), or that reruns finished steps when resumed.
    One variant (the chosen one) keeps it short; the other variants' arguments are the test above's."""
    make_drawings(tmp_path / "data", alphabets=("Alpha", "Beta", "Gamma", "Delta"), characters=4, drawers=4)
    two_runs(tmp_path / "runs")
    runs = zip_runs(tmp_path / "runs", tmp_path / "all_runs.zip")
    (tmp_path / "space.yaml").write_text(SPACE)
    out = tmp_path / "study"
    command = ["bash", str(REPO / "scripts" / "study_omniglot_oneshot.sh"), str(out), "--budget", "2", "--seeds", "1",
               "--data", str(tmp_path / "data"), "--runs", str(runs), "--space", str(tmp_path / "space.yaml"),
               "--variants", "xbm", "--sweep-arg=--num-samples", "--sweep-arg=1",
               "--sweep-arg=--max-concurrent", "--sweep-arg=1"]
    env = {"XBM_PYTHON": sys.executable, "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    chosen = json.loads((out / "chosen.json").read_text())
    assert chosen["variant"] == "xbm" and chosen["config"]["train_on"] == "all"
    assert chosen["config"]["val_fraction"] == 0.0 and "seed" not in chosen["config"]
    assert (out / "chosen.yaml").read_text().startswith("# The Omniglot one-shot study's choice")
    refits = pd.read_csv(out / "results" / "refits.csv")
    assert refits["variant"].tolist() == ["xbm"] and refits["seed"].tolist() == [1]
    assert refits["error"].between(0, 100).all()
    assert pd.read_csv(out / "results" / "validation.csv")["val_oneshot_error"].between(0, 100).all()
    scorings = pd.read_csv(out / "scorings.csv")
    assert len(scorings) == 3   # the refit, the two references
    summary = (out / "summary.md").read_text()
    assert "## Memory comparison" in summary and "scored 3 time(s)" in summary
    # the rerun resumes: nothing runs again, nothing is scored again
    again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "xbm-tune" not in again.stdout.replace("[study]", "").split("chosen:")[1]
    assert len(pd.read_csv(out / "scorings.csv")) == 3
    assert len(json.loads((out / "study.json").read_text())["invocations"]) == 2
