"""tune/stages/confirm.py: the confirm stage's plan (its candidates, seeds and configs) from the command's arguments,
on a hand-written sweep."""
from __future__ import annotations

import argparse
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.tune.stages.sweep_rows import ROWS, write_sweep
from tune.commands.confirm import add_arguments
from tune.errors import SweepInputError
from tune.stages.confirm import confirm_configs, plan_confirm as plan
from tune.stages.selection import select_top
from xbm.config import TrainConfig


def args(path, *extra):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([path, *extra])


def test_confirm_configs_cross_candidates_with_shared_seeds():
    chosen = select_top(ROWS, "recall_at_1", "max", top=2)
    configs = confirm_configs(chosen, [1, 2, 3], {"device": "cpu"})
    assert len(configs) == 6 and [c["seed"] for c in configs] == [1, 2, 3, 1, 2, 3]
    assert all(c["evaluate_test"] is True and c["device"] == "cpu" for c in configs)
    for config in configs:
        TrainConfig.from_dict(config)


def test_plan_reads_the_sweep_and_defaults_seeds_after_the_sweep_seed(tmp_path):
    path = write_sweep(tmp_path, ROWS, seed=10)
    p = plan(args(path, "--top", "2", "--seeds", "3"))
    assert p.seeds == [11, 12, 13] and [c.trial_id for c in p.candidates] == ["b", "c"] and len(p.configs) == 6
    assert plan(args(path, "--seed-start", "100", "--seeds", "2")).seeds == [100, 101]


@pytest.mark.parametrize("extra, fragment", [
    (["--top", "0"], "--top and --seeds must be >= 1"),
    (["--set", "epochs=0"], "epochs must satisfy >= 1"),
    (["--set", "nope=1"], "unknown config key 'nope'"),
])
def test_plan_refuses_bad_input(tmp_path, extra, fragment):
    path = write_sweep(tmp_path, ROWS)
    with pytest.raises(SweepInputError, match=fragment):
        plan(args(path, *extra))


def test_plan_refuses_a_sweep_without_candidates_or_record(tmp_path):
    with pytest.raises(SweepInputError, match="nothing to confirm"):
        plan(args(write_sweep(tmp_path, [ROWS[4], ROWS[5]])))
    with pytest.raises(SweepInputError, match="sweep.json is missing"):
        plan(args(str(tmp_path / "missing")))


def test_plan_reads_files_where_the_sweep_records_them_and_checks_them(tmp_path, monkeypatch):
    """Bug: confirm re-ran the sweep's configs with the paths as recorded per trial (a relative one read
    in the trial's own directory, an old one after the sweep moved), and found a missing file only in the
    trials. sweep.json's paths win, --set paths are relative to the working directory, files are checked."""
    path = write_sweep(tmp_path, ROWS)
    record_file = tmp_path / "sweep" / "results" / "sweep.json"
    weights = tmp_path / "w.pth"
    weights.write_bytes(b"checked for existence only")
    record = json.loads(record_file.read_text())
    record_file.write_text(json.dumps({**record, "paths": {"pretrained_path": str(weights)}}))
    monkeypatch.chdir(tmp_path)
    p = plan(args(path, "--top", "1", "--seeds", "1", "--set", "data_root=data"))
    assert p.configs[0]["pretrained_path"] == str(weights) and p.configs[0]["data_root"] == str(tmp_path / "data")
    with pytest.raises(SweepInputError, match=f"pretrained_path must name an existing.*{tmp_path / 'gone.pth'}"):
        plan(args(path, "--set", "pretrained_path=gone.pth"))


def test_a_two_objective_sweep_confirms_its_pareto_front(tmp_path):
    """Bug caught: confirm --top on a several-objective sweep taking the first objective's top K (dominated
    trials re-run, cheap non-dominated ones left out) instead of the front."""
    rows = [{**r, "final_recall_at_1": r["best_recall_at_1"]} for r in ROWS]
    cost = {"a": 1.0, "b": 5.0, "b_again": 5.0, "early": 10.0, "c": 6.0, "failed": 0.1, "nan": 0.1, "old_confirm": 0.1}
    for r in rows:
        r["gpu_hours"] = cost[r["trial_id"]]
    path = write_sweep(tmp_path, [{k: v for k, v in r.items() if k not in ("final_recall_at_1", "gpu_hours")}
                                  for r in rows])
    results = tmp_path / "sweep" / "results"
    table = pq.read_table(results / "trials.parquet")
    table = table.append_column("final_recall_at_1", pa.array([r["final_recall_at_1"] for r in rows], pa.float64()))
    table = table.append_column("gpu_hours", pa.array([r["gpu_hours"] for r in rows], pa.float64()))
    pq.write_table(table, results / "trials.parquet")
    record = json.loads((results / "sweep.json").read_text())
    (results / "sweep.json").write_text(json.dumps({**record, "extra_metrics": ["gpu_hours"], "extra_modes": ["min"]}))
    # front on (final recall max, gpu_hours min): early (0.99, 10), b (0.70, 5), a (0.50, 1); b dominates c
    # (0.60, 6) and b_again; ranked as select_top does (completed first, then recall): the first objective
    # alone would have taken b, c, a
    assert [c.trial_id for c in plan(args(path, "--top", "3")).candidates] == ["b", "a", "early"]
