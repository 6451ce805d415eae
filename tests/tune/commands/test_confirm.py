"""tune/commands/confirm.py: selection of the top configurations on a fixture, planning, and end to end on the toy."""
from __future__ import annotations

import argparse
import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tune.commands.confirm import add_arguments
from tune.errors import SweepInputError
from tune.stages.confirm import confirm_configs, plan_confirm as plan
from tune.stages.selection import select_top
from xbm.config import TrainConfig

DEFAULTS = TrainConfig().to_dict()
_ARROW = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}
BASE = {"dataset": "toy", "model": "mlp", "embedding_size": 16, "epochs": 2, "warmup_epochs": 0,
        "batch_size": 16, "samples_per_class": 4, "val_fraction": 0.2, "seed": 0}


def row(trial_id, best, status="completed", stage="sweep", **config):
    values = {**DEFAULTS, **BASE, "normaliser.lambda_mu": None,
              **{k.replace("__", "."): v for k, v in config.items()}}
    return {"experiment": "s", "stage": stage, "trial_id": trial_id, "status": status,
            "best_recall_at_1": best, **{f"config.{k}": v for k, v in values.items()}}


ROWS = [
    row("a", 0.50, normaliser__kind="xbn", memory__ratio=0.2),
    row("b", 0.70, normaliser__kind="pcxbn", normaliser__lambda_mu=0.3, memory__ratio=0.5),
    row("b_again", 0.65, normaliser__kind="pcxbn", normaliser__lambda_mu=0.3, memory__ratio=0.5, seed=5),
    row("early", 0.99, status="stopped_early", normaliser__kind="axbn", memory__ratio=0.1),
    row("failed", None, status="failed", normaliser__kind="ema"),
    row("nan", math.nan, normaliser__kind="none"),
    row("old_confirm", 0.95, stage="confirm", normaliser__kind="xbn", memory__ratio=0.3),
    row("c", 0.60, normaliser__kind="none", memory__ratio=1.0),
]


def write_sweep(tmp_path, rows, metric="recall_at_1", mode="max", seed=0):
    fields = [pa.field(k, pa.string()) for k in ("experiment", "stage", "trial_id", "status")]
    fields += [pa.field("best_recall_at_1", pa.float64())]
    fields += [pa.field(f"config.{k}", _ARROW[type(v)]) for k, v in DEFAULTS.items()]
    results = tmp_path / "sweep" / "results"
    results.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema(fields)), results / "trials.parquet")
    record = {"experiment": "sweep", "metric": metric, "mode": mode, "max_epochs": 2,
              "options": {"seed": seed, "metric": metric, "mode": mode, "num_samples": 4},
              "space": {"params": ["normaliser.kind", "normaliser.lambda_mu", "memory.ratio"]}}
    (results / "sweep.json").write_text(json.dumps(record))
    return str(tmp_path / "sweep")


def args(path, *extra):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([path, *extra])


def test_select_top_ranks_completed_first_and_counts_a_config_once():
    chosen = select_top(ROWS, "recall_at_1", "max", top=3)
    assert [c.trial_id for c in chosen] == ["b", "c", "a"]
    assert [c.rank for c in chosen] == [1, 2, 3] and chosen[0].duplicates == 2
    assert chosen[0].config["normaliser.lambda_mu"] == 0.3 and "seed" not in chosen[0].config
    assert "normaliser.lambda_mu" not in chosen[1].config  # absent (null) params stay absent
    # the early-stopped trial comes after every completed one, whatever its value
    assert [c.trial_id for c in select_top(ROWS, "recall_at_1", "max", top=10)] == ["b", "c", "a", "early"]
    assert [c.trial_id for c in select_top(ROWS, "recall_at_1", "min", top=2)] == ["a", "c"]


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


def test_cli_dry_run_prints_the_selection_and_writes_nothing(tmp_path, capsys):
    from tune.cli import main

    path = write_sweep(tmp_path, ROWS)
    before = sorted(p.name for p in (tmp_path / "sweep").rglob("*"))
    assert main(["confirm", path, "--top", "2", "--seeds", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "confirming 2 configuration(s) x 2 seed(s) [1, 2] = 4 run(s)" in out and "#1 b" in out
    assert "normaliser.kind=pcxbn, normaliser.lambda_mu=0.3, memory.ratio=0.5" in out
    assert sorted(p.name for p in (tmp_path / "sweep").rglob("*")) == before
    assert main(["confirm", path, "--top", "0"]) == 2


@pytest.mark.slow
def test_confirm_end_to_end_on_the_toy_trainable(ray_session, toy_space, tmp_path):
    import pandas as pd
    from tune.cli import main

    # one trial at a time: each stage then starts one actor (imports dominate on 2 cores)
    assert main(["sweep", str(toy_space), "--num-samples", "2", "--search", "random", "--scheduler", "fifo",
                 "--no-dashboard", "--storage", str(tmp_path), "--name", "s", "--seed", "0",
                 "--max-concurrent", "1"]) == 0
    sweep = tmp_path / "s"
    assert main(["confirm", str(sweep), "--top", "1", "--seeds", "2", "--no-dashboard",
                 "--max-concurrent", "1"]) == 0
    trials = pd.read_parquet(sweep / "results" / "trials.parquet")
    swept, confirmed = trials[trials["stage"] == "sweep"], trials[trials["stage"] == "confirm"]
    assert len(swept) == 2 and len(confirmed) == 2
    best = swept.sort_values("best_recall_at_1", ascending=False, kind="stable").iloc[0]
    assert sorted(confirmed["seed"]) == [1, 2] and (confirmed["status"] == "completed").all()
    assert confirmed["config.evaluate_test"].all() and (confirmed["epochs_completed"] == 2).all()
    for key in ("config.normaliser.kind", "config.memory.ratio", "config.epochs"):
        assert (confirmed[key] == best[key]).all()
    for trial_id in confirmed["trial_id"]:
        epochs = pd.read_parquet(sweep / "results" / "epochs" / f"{trial_id}.parquet")
        assert list(epochs["epoch"]) == [1, 2] and epochs["test_recall_at_1"].notna().all()
        assert (epochs["stage"] == "confirm").all()


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
