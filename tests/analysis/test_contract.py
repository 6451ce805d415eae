"""analysis/contract.py and analysis/sweep_record.py: the column types, the summary rule, the read retries and
the sweep record, old records included. The sink-to-loader round trip is tests/tune/test_contract_roundtrip.py."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from analysis import contract, load
from analysis.contract import SweepRecord

FIXTURES = Path(__file__).parent / "fixtures"


def test_declared_columns_have_their_type_whatever_the_value_reported():
    """Bug caught: a column typed by its first value (a time reported as the int 0 becoming int64 in one
    file and float64 in the next, so the files no longer concatenate; a counter reported as 2.0 written
    as a float; ``best_weights`` None-typed)."""
    assert contract.column_type("train_s", 0) == pa.float64()
    assert contract.column_type("gpu_memory_peak_gib", None) == pa.float64()
    assert contract.column_type("skipped_images", 2.0) == pa.int64()
    assert contract.column_type("retries", 1.0) == pa.int64()
    assert contract.column_type("best_weights", None) == pa.string()
    assert contract.column_type("some_new_metric", 3) == pa.float64()
    assert contract.column_type("some_new_text", "a") == pa.string()
    names = [f.name for f in contract.trial_fields("loss")]
    new = {"train_s", "data_wait_s", "eval_s", "checkpoint_s", "setup_s", "train_fraction", "best_weights"}
    assert new <= set(names)
    assert names.index("best_loss") < names.index("best_epoch") < names.index("best_recall_at_1")


def test_summary_is_mode_aware_and_final_is_the_last_finite_value():
    """Bug caught: ``final_`` read from the last row although it has no evaluation (NaN, as with a future
    ``eval_every``); a NaN taken as the best; recall_at_1 / map_at_r summarised in a min sweep's direction;
    best_epoch not the first epoch reaching the best; the time sums counting a NaN or missing value."""
    nan = math.nan
    rows = [{"epoch": 1, "loss": 0.9, "recall_at_1": 0.2, "map_at_r": 0.1, "train_s": 10.0, "eval_s": 2.0,
             "setup_s": 4.0},
            {"epoch": 2, "loss": 0.4, "recall_at_1": 0.5, "map_at_r": 0.3, "train_s": 11.0, "eval_s": nan,
             "setup_s": 4.0},
            {"epoch": 3, "loss": 0.4, "recall_at_1": 0.5, "map_at_r": 0.2, "train_s": 12.5, "setup_s": 4.0},
            {"epoch": 4, "loss": nan, "recall_at_1": nan, "map_at_r": None, "train_s": 9.5, "eval_s": 3.0,
             "setup_s": 4.0, "best_weights": "s3://b/x/best"}]
    out = contract.summarise(rows, "loss", "min")
    assert (out["best_loss"], out["best_epoch"], out["final_loss"]) == (0.4, 2, 0.4)
    assert (out["best_recall_at_1"], out["final_recall_at_1"]) == (0.5, 0.5)
    assert (out["best_map_at_r"], out["final_map_at_r"]) == (0.3, 0.2)
    assert out["train_s"] == 10.0 + 11.0 + 12.5 + 9.5 and out["eval_s"] == 5.0
    assert out["data_wait_s"] is None and out["checkpoint_s"] is None
    assert out["setup_s"] == 4.0 and out["best_weights"] == "s3://b/x/best"
    assert contract.summarise([], "recall_at_1", "max")["best_epoch"] is None
    assert contract.train_fraction(43.0, 50.0) == pytest.approx(0.86)
    assert contract.train_fraction(None, 50.0) is None and contract.train_fraction(43.0, None) is None
    assert contract.train_fraction(43.0, 0.0) is None


def test_reads_are_retried_the_declared_number_of_times_then_fail():
    """Bug caught: a read racing a replacement failing at once (no retry), or a torn file retried forever."""
    calls = []

    def torn():
        calls.append(1)
        raise pa.ArrowInvalid("torn")

    with pytest.raises(pa.ArrowInvalid):
        contract.read_retried(torn, (pa.ArrowInvalid,), delay_s=0.0)
    assert len(calls) == contract.READ_ATTEMPTS == 5
    answers = iter([pa.ArrowInvalid("torn"), "whole"])

    def second_time_whole():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert contract.read_retried(second_time_whole, (pa.ArrowInvalid,), delay_s=0.0) == "whole"


def test_an_old_sweep_json_still_loads():
    """Bug caught: a sweep.json written before the record was versioned (no ``version``, ``space.params``
    a list of names) refused, or read with the wrong metric, mode or swept names, or claimed to know
    log scales it does not record."""
    record = SweepRecord.from_json((FIXTURES / "sweep_v0.json").read_text())
    assert record.version == 0 and not record.has_specs
    assert (record.metric, record.mode, record.max_epochs) == ("map_at_r", "max", 6)
    assert record.swept == ("normaliser.kind", "memory.ratio", "normaliser.kalman_r")
    assert record.paths == {"data_root": "/data/omniglot_small"} and record.option("grace_period") == 1
    assert record.log_scale() == {} and record.specs() == {}
    assert record.provenance == {"git_sha": "3dfe4872c0a1b9e5d6f7a8b9c0d1e2f3a4b5c6d7", "package_version": "0.1.0"}
    rewritten = SweepRecord.from_dict(record.to_dict())  # e.g. resume --set data_root: written at version 1
    assert rewritten.swept == record.swept and rewritten.space.text == record.space.text
    assert record.rungs is None and rewritten.rungs is None  # written before --rungs: its options give them


def test_the_rungs_a_sweep_was_judged_at_round_trip():
    """Bug caught: sweep.json's ``rungs`` (ASHA's rung epochs, --rungs) lost or turned into another type when
    the record is read back and rewritten (resume --set data_root)."""
    record = SweepRecord.from_json(SweepRecord(experiment="r", rungs=(15, 30, 45)).to_json())
    assert record.rungs == (15, 30, 45) and record.to_dict()["rungs"] == [15, 30, 45]


def test_an_old_sweep_folder_reads_its_log_scales_from_the_yaml_text(tmp_path, build_sweep):
    """Bug caught: ``analysis.load`` of an old sweep losing the declared log scale (memory.ratio plotted and
    binned on a linear axis) because the record has no distributions."""
    b = build_sweep
    cfg = b["config"]("xbn", 0.5, 0)
    rows = b["epoch_rows"]("a", cfg, 0.6, 2)
    folder = b["write_sweep"](tmp_path / "old", [b["trial_row"]("a", cfg, rows, "completed")], rows)
    shutil.copy(FIXTURES / "sweep_v0.json", folder / "results" / "sweep.json")
    sweep = load(folder)
    assert sweep.metric == "map_at_r"
    assert sweep.declared_log_scale() == {"config.normaliser.kind": False, "config.memory.ratio": True,
                                          "config.normaliser.kalman_r": False}


def test_a_versioned_record_knows_its_log_scales_without_the_yaml(tmp_path, build_sweep):
    """Bug caught: the log scale of a parameter read by re-parsing the space's YAML (a record whose text
    is absent, or a space file changed since, gives the wrong or no scale), or a several-branch parameter
    taken as log-scale when one branch is linear."""
    specs = {"memory.ratio": {"loguniform": [0.05, 1.0]},
             "normaliser.kind": {"choice": ["none", "axbn"]},
             "normaliser.kalman_r": {"loguniform": [1e-4, 10.0], "when": {"normaliser.kind": ["axbn"]}},
             "miner.pos_margin": [{"uniform": [0.0, 0.6], "when": {"miner.distance": ["lp"]}},
                                  {"loguniform": [0.5, 1.0], "when": {"miner.distance": ["cosine"]}}]}
    record = SweepRecord(experiment="new", metric="recall_at_1", space=contract.SpaceRecord(name="s", params=specs))
    back = SweepRecord.from_json(record.to_json())
    assert back == record and back.version == contract.RECORD_VERSION == 1
    assert back.log_scale() == {"memory.ratio": True, "normaliser.kind": False, "normaliser.kalman_r": True,
                                "miner.pos_margin": False}
    b = build_sweep
    cfg = b["config"]("xbn", 0.5, 0)
    rows = b["epoch_rows"]("a", cfg, 0.6, 2)
    folder = b["write_sweep"](tmp_path / "new", [b["trial_row"]("a", cfg, rows, "completed")], rows)
    (folder / "results" / "sweep.json").write_text(record.to_json())  # no YAML text at all
    sweep = load(folder)
    assert sweep.declared_log_scale()["config.memory.ratio"] is True
    assert sweep.declared_params()["config.normaliser.kind"] == {"choice": ["none", "axbn"]}
    assert "config.miner.pos_margin" not in sweep.declared_params()  # several branches: no one spec
    assert json.loads(record.to_json())["space"]["params"]["memory.ratio"] == {"loguniform": [0.05, 1.0]}


def test_unknown_keys_survive_a_rewrite():
    """Bug caught: a record rewritten by an older version (``resume --set data_root``) dropping keys a newer
    version wrote."""
    record = SweepRecord.from_dict({"version": 1, "metric": "loss", "mode": "min", "objectives": ["loss", "r1"],
                                    "space": {"params": {}}})
    assert record.replace(paths={"data_root": "/new"}).to_dict()["objectives"] == ["loss", "r1"]
    with pytest.raises(ValueError, match="JSON object"):
        SweepRecord.from_dict(["not", "a", "record"])


def test_extra_objectives_are_summarised_under_their_own_mode():
    """Bug caught: a second objective (memory_bytes:min) summarised as max like the always-summarised
    metrics, best_epoch taken from it instead of the first metric, or a trial-level objective (gpu_hours)
    given best_/final_ columns nobody fills."""
    rows = [{"epoch": 1, "recall_at_1": 0.2, "memory_bytes": 300}, {"epoch": 2, "recall_at_1": 0.5, "memory_bytes": 100},
            {"epoch": 3, "recall_at_1": 0.4, "memory_bytes": 200}]
    out = contract.summarise(rows, "recall_at_1", "max", {"memory_bytes": "min", "gpu_hours": "min"})
    assert (out["best_memory_bytes"], out["final_memory_bytes"], out["best_epoch"]) == (100, 200, 2)
    assert "best_gpu_hours" not in out
    names = [f.name for f in contract.trial_fields("recall_at_1", extra=("memory_bytes", "gpu_hours"))]
    assert "final_memory_bytes" in names and "final_gpu_hours" not in names and names.count("gpu_hours") == 1
    assert contract.objective_column("gpu_hours") == "gpu_hours"
    assert contract.objective_column("memory_bytes") == "final_memory_bytes"
