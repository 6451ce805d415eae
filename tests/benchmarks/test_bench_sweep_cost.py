"""benchmarks/bench_sweep_cost.py's training fraction and its instrument (benchmarks/train_timing/)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = load(BENCHMARKS / "bench_sweep_cost.py", "bench_sweep_cost")
timing = load(BENCHMARKS / "train_timing" / "sitecustomize.py", "train_timing_sitecustomize")


def trial(tid: str, status: str, epochs: int, wall: float) -> dict:
    return {"trial_id": tid, "status": status, "epochs_completed": epochs, "wall_time_s": wall}


def test_fractions_are_pooled_over_trials_not_averaged():
    """Averaging per-trial fractions would weight a 4-s stopped trial like a 36-s finished one: the sweep's
    fraction is (2 + 6 + 30) / (4 + 8 + 36) = 0.7917, not mean(0.5, 0.75, 0.833) = 0.694."""
    trials = [trial("a", "stopped_early", 1, 4.0), trial("b", "stopped_early", 1, 8.0), trial("c", "completed", 9, 36.0)]
    out = bench.training_fractions(trials, {"a": 2.0, "b": 6.0, "c": 30.0}, grace=1)
    assert out["sweep"] == pytest.approx(38 / 48)
    assert out["first_rung"] == pytest.approx(8 / 12)
    assert out["first_rung_range"] == (pytest.approx(0.5), pytest.approx(0.75))
    assert out["first_rung_trials"] == 2
    assert out["per_trial"]["c"] == pytest.approx(30 / 36)


def test_first_rung_counts_only_trials_stopped_at_the_grace_period():
    """A trial stopped at the second rung (3 epochs) or one that completed a 1-epoch budget is not a trial
    'stopped at the first rung': counting them would mix in trials that paid their fixed costs over more
    epochs."""
    trials = [trial("a", "stopped_early", 1, 10.0), trial("b", "stopped_early", 3, 10.0), trial("c", "completed", 1, 10.0)]
    out = bench.training_fractions(trials, {"a": 5.0, "b": 8.0, "c": 9.0}, grace=1)
    assert out["first_rung"] == pytest.approx(0.5)
    assert out["first_rung_trials"] == 1
    assert out["sweep"] == pytest.approx(22 / 30)


def test_a_trial_the_instrument_missed_is_an_error_not_a_zero():
    """If a revision trains outside Trainer.train_epoch, its trials have no timed pass: reading that as a
    training fraction of 0 would report a regression that is the instrument's blind spot."""
    with pytest.raises(ValueError, match="train_epoch was not called"):
        bench.training_fractions([trial("a", "completed", 1, 10.0), trial("b", "completed", 1, 10.0)],
                                 {"a": 5.0}, grace=1)


def test_durations_are_summed_per_trial_across_process_files(tmp_path):
    """With reuse_actors one process runs several trials and a trial's retry may run in another process:
    seconds are keyed by trial id, summed over every file; lines outside a trial (id null) are ignored."""
    lines = {"1.jsonl": [("a", 1, 1.5), ("b", 1, 2.0), (None, 1, 9.0)], "2.jsonl": [("a", 2, 0.5)]}
    for name, records in lines.items():
        (tmp_path / name).write_text("".join(json.dumps({"trial_id": t, "epoch": e, "seconds": s, "pid": 1}) + "\n"
                                             for t, e, s in records))
    assert bench.read_durations(tmp_path) == {"a": 2.0, "b": 2.0}


def test_derived_space_sweeps_kind_by_ratio_with_the_default_warm_up():
    """The shipped omniglot_small space pins warmup_epochs: 0 and memory.ratio: 1.0; the issue's sweep uses
    the default warm-up and sweeps the ratio, so both must leave the base."""
    import yaml

    space = yaml.safe_load(bench.derived_space(("none", "xbn"), (0.2, 1.0), 9))
    assert "warmup_epochs" not in space["base"] and "memory.ratio" not in space["base"]
    assert space["base"]["epochs"] == 9 and space["base"]["dataset"] == "omniglot"
    assert space["params"] == {"normaliser.kind": {"grid": ["none", "xbn"]}, "memory.ratio": {"grid": [0.2, 1.0]}}


def test_wrap_records_each_pass_once_and_keeps_the_result(tmp_path):
    """The instrument must return the trainer's EpochResult unchanged, and wrapping twice (sitecustomize
    imported again) must not count every pass twice."""
    class Trainer:
        def train_epoch(self, epoch):
            return ("result", epoch)

    timing.wrap(Trainer, str(tmp_path))
    timing.wrap(Trainer, str(tmp_path))
    assert Trainer().train_epoch(3) == ("result", 3)
    (record,) = [json.loads(line) for f in tmp_path.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert record["epoch"] == 3 and record["trial_id"] is None and record["seconds"] >= 0


def test_sitecustomize_wraps_the_trainer_when_it_is_imported(tmp_path):
    """The hook must patch xbm.trainer in a fresh interpreter that only has the folder on PYTHONPATH (as
    Ray's trial processes do), and leave other modules alone; a fake xbm package keeps torch out."""
    package = tmp_path / "pkg" / "xbm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "trainer.py").write_text("class Trainer:\n    def train_epoch(self, epoch):\n        return epoch * 2\n")
    times = tmp_path / "times"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "pkg"), str(BENCHMARKS / "train_timing")]),
           "XBM_TRAIN_TIMES_DIR": str(times)}
    code = "from xbm.trainer import Trainer; print(Trainer().train_epoch(4), getattr(Trainer.train_epoch, '_timed', False))"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         check=True).stdout  # cwd: not the repository, whose real xbm would come first
    assert out.split() == ["8", "True"]
    (record,) = [json.loads(line) for f in times.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert record["epoch"] == 4
