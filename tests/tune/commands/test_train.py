"""tune/commands/train.py: ``xbm-tune train --workers 2`` runs on a local Ray (gloo) and writes the same folder
as the one-worker run, with the same per-epoch losses (the global batch split over two ranks)."""
from __future__ import annotations

import json

import pytest
import ray
import yaml

from tune.cli import main

RUN = ["train", "--set", "dataset=toy", "--set", "model=mlp", "--set", "embedding_size=16", "--set", "epochs=2",
       "--set", "warmup_epochs=0", "--set", "batch_size=16", "--set", "samples_per_class=4", "--set", "device=cpu",
       "--no-progress"]


@pytest.mark.slow
def test_two_workers_write_the_one_worker_runs_folder_with_its_losses(tmp_path, ray_down, monkeypatch):
    """Bug caught (issue 20): ``--workers 2`` ignored (one process trains), each worker writing the folder
    (metrics rows doubled), the run's config without ``workers``, its Ray left running, or the ranks training
    on other batches than the one-worker run (its losses then differ beyond rounding). And a relative
    ``--output`` (the default ``runs/<time>`` too) resolved in the Ray worker's own folder: the run's files
    went to Ray's session directory while the command printed the user's path."""
    assert main([*RUN, "--output", str(tmp_path / "one")]) == 0
    monkeypatch.chdir(tmp_path)
    assert main([*RUN, "--workers", "2", "--output", "two"]) == 0
    assert not ray.is_initialized()
    one = [json.loads(line) for line in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    two = [json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in two] == [1, 2]
    assert yaml.safe_load((tmp_path / "two" / "config.yaml").read_text())["workers"] == 2
    assert (tmp_path / "two" / "checkpoint.pt").is_file() and (tmp_path / "two" / "best_weights.pt").is_file()
    for a, b in zip(one, two):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
        assert b["memory_fill"] == a["memory_fill"]


def test_only_rank_0_gets_bars_and_only_when_the_driver_draws_them():
    """Bug caught (issue 55): ``--workers N`` training without the one-worker run's bars, N bars (every rank's),
    or bars sent to a driver that does not draw them (``--no-progress``, stderr not a terminal)."""
    from tune.trial.data_parallel import rank_bars

    bars = rank_bars(True, is_main=True)
    assert sorted(bars) == ["eval_progress", "progress"] and all(callable(b) for b in bars.values())
    assert rank_bars(True, is_main=False) == {} and rank_bars(False, is_main=True) == {}
