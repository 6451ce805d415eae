"""The Parquet sink on fake trials (no Ray): schema, statuses, atomic replacement, resume without
duplicated or lost rows, trials.parquet's throttled rewrites and the reconciliation after a killed
driver, and the files read as they are by pandas, pyarrow, polars and duckdb."""
from __future__ import annotations

import logging
import math
from types import SimpleNamespace

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from analysis import location
from analysis.location import Folder
from tune.results import parquet
from tune.results import sink as sink_module
from tune.results.sink import ParquetSink

BASE = {"dataset": "toy", "model": "mlp", "embedding_size": 32, "epochs": 4, "seed": 3}


class FakeTrial(SimpleNamespace):
    """The attributes of ``ray.tune.experiment.Trial`` the sink reads."""

    def __init__(self, trial_id: str, config: dict, gpus: float = 0.0, error: str | None = None) -> None:
        super().__init__(trial_id=trial_id, config=config, num_failures=0, last_result={},
                         placement_group_factory=SimpleNamespace(required_resources={"CPU": 1.0, "GPU": gpus}))
        self._error = error

    def get_error(self):
        return self._error

    def __str__(self) -> str:
        return f"{self.trial_id}_name"


def result(epoch: int, recall: float, **extra) -> dict:
    return {"epoch": epoch, "recall_at_1": recall, "map_at_r": recall / 2, "loss": 1.0 / epoch, "lr": 1e-3,
            "eval_split": "test", "drift_mean": math.nan if epoch == 1 else 0.1, "node_id": "n1",
            "gpu_ids": None, "time_total_s": 2.0 * epoch, "training_iteration": epoch, "pid": 123,
            "done": False, "config": {"x": 1}, **extra}


def feed(sink: ParquetSink, trial: FakeTrial, epochs, values=None) -> None:
    sink.on_trial_start(0, [], trial)
    for epoch in epochs:
        value = (values or {}).get(epoch, 0.1 * epoch)
        res = result(epoch, value)
        trial.last_result = res
        sink.on_trial_result(0, [], trial, res)


def make_sink(folder, interval: float = 0.0, **kwargs) -> ParquetSink:
    """A sink on ``folder``; ``interval`` 0 writes trials.parquet at every event, so tests can read it."""
    sink = ParquetSink(str(folder), "exp", "recall_at_1", "max",
                       swept=("normaliser.kind", "normaliser.lambda_mu"), provenance={"git_sha": "abc",
                                                                                      "package_version": "0.1.0"},
                       **kwargs)
    sink.trials_interval_s = interval
    sink.setup()
    return sink


def test_epoch_rows_and_trial_summary_follow_the_contract(tmp_path):
    sink = make_sink(tmp_path)
    trial = FakeTrial("t1", {**BASE, "normaliser.kind": "xbn", "normaliser.lambda_mu": None}, gpus=0.5)
    feed(sink, trial, [1, 2, 3, 4], {1: 0.2, 2: 0.5, 3: 0.4, 4: 0.45})
    sink.on_trial_complete(0, [], trial)

    epochs = pq.read_table(tmp_path / "epochs" / "t1.parquet")
    assert epochs.column("epoch").to_pylist() == [1, 2, 3, 4]
    assert epochs.schema.field("epoch").type == pa.int64()
    assert epochs.schema.field("recall_at_1").type == pa.float64()
    assert epochs.schema.field("eval_split").type == pa.string()
    assert epochs.schema.field("config.embedding_size").type == pa.int64()
    assert epochs.schema.field("config.normaliser.unit_norm").type == pa.bool_()
    assert epochs.column("config.normaliser.lambda_mu").null_count == 4  # absent conditional parameter
    assert epochs.column("config.normaliser.kind").to_pylist() == ["xbn"] * 4
    assert epochs.column("config.lr").to_pylist()[0] == pytest.approx(1e-4)  # TrainConfig default filled in
    assert math.isnan(epochs.column("drift_mean").to_pylist()[0])
    for tune_key in ("pid", "training_iteration", "done", "config", "time_total_s"):
        assert tune_key not in epochs.schema.names

    row = pq.read_table(tmp_path / "trials.parquet").to_pylist()[0]
    assert row["status"] == "completed" and row["epochs_completed"] == 4
    assert row["best_recall_at_1"] == 0.5 and row["best_epoch"] == 2 and row["final_recall_at_1"] == 0.45
    assert row["best_map_at_r"] == 0.25 and row["final_map_at_r"] == 0.225
    assert row["wall_time_s"] == 8.0 and row["gpu_hours"] == pytest.approx(8.0 * 0.5 / 3600)
    assert row["seed"] == 3 and row["node_id"] == "n1" and row["stage"] == "sweep"
    assert row["git_sha"] == "abc" and row["package_version"] == "0.1.0" and row["experiment"] == "exp"


def test_statuses_and_reasons(tmp_path):
    reasons = {}
    sink = make_sink(tmp_path, stop_reasons=reasons)
    early = FakeTrial("early", {**BASE, "normaliser.kind": "none"})
    feed(sink, early, [1])
    reasons["early"] = "asha: recall_at_1=0.1 below the rung cutoff at epoch 1"
    sink.on_trial_complete(0, [], early)

    nan = FakeTrial("nan", {**BASE, "normaliser.kind": "xbn"})
    feed(sink, nan, [1])
    sink.on_trial_result(0, [], nan, {"epoch": 2, "recall_at_1": -math.inf, "error": "NonFiniteLossError: nan"})
    sink.on_trial_complete(0, [], nan)

    crash = FakeTrial("crash", {**BASE, "normaliser.kind": "xbn"}, error="Traceback ...\nRuntimeError: boom")
    feed(sink, crash, [1])
    crash.num_failures = 1
    sink.on_trial_recover(0, [], crash)
    assert sink.trials["crash"]["status"] == "running" and sink.trials["crash"]["retries"] == 1
    crash.num_failures = 2
    sink.on_trial_error(0, [], crash)

    rows = {r["trial_id"]: r for r in pq.read_table(tmp_path / "trials.parquet").to_pylist()}
    assert rows["early"]["status"] == "stopped_early"
    assert rows["early"]["stop_reason"].startswith("asha: recall_at_1=0.1") and "1/4 epochs" in rows["early"]["stop_reason"]
    assert rows["nan"]["status"] == "failed" and rows["nan"]["stop_reason"] == "non-finite loss"
    assert rows["nan"]["error"] == "NonFiniteLossError: nan" and rows["nan"]["epochs_completed"] == 1
    assert rows["crash"]["status"] == "failed" and rows["crash"]["error"] == "RuntimeError: boom"
    assert rows["crash"]["retries"] == 2
    assert pq.read_table(tmp_path / "epochs" / "nan.parquet").num_rows == 1  # the error report is no epoch


def test_a_config_the_trainer_refuses_fails_its_trial_alone_and_keeps_the_values_it_was_given(tmp_path):
    """Bugs caught: the sink building a refused config's TrainConfig inside a Tune callback, which raises and stops
    the whole sweep with every other trial (Ray's PBT once explored lambda_mu to 1.17); the refused trial's row
    losing the values that made it fail, or a value that fits no column breaking trials.parquet's write."""
    sink = make_sink(tmp_path)
    refused = FakeTrial("refused", {**BASE, "normaliser.kind": "pcxbn", "normaliser.lambda_mu": 1.17,
                                    "batch_size": "many", "not_a_key": 1},
                        error="Traceback ...\nValueError: normaliser.lambda_mu must satisfy 0 <= lambda_mu <= 1")
    good = FakeTrial("good", {**BASE, "normaliser.kind": "xbn", "normaliser.lambda_mu": None})
    sink.on_trial_start(0, [], refused)
    feed(sink, good, [1, 2, 3, 4])
    refused.num_failures = 1
    sink.on_trial_error(0, [], refused)
    sink.on_trial_complete(0, [], good)

    rows = {r["trial_id"]: r for r in pq.read_table(tmp_path / "trials.parquet").to_pylist()}
    assert rows["good"]["status"] == "completed" and rows["good"]["config.normaliser.kind"] == "xbn"
    assert rows["refused"]["status"] == "failed" and "lambda_mu <= 1" in rows["refused"]["error"]
    assert rows["refused"]["config.normaliser.lambda_mu"] == 1.17
    assert rows["refused"]["config.normaliser.kind"] == "pcxbn" and rows["refused"]["config.embedding_size"] == 32
    assert rows["refused"]["config.batch_size"] is None   # given a word: no int64 column holds it
    assert "config.not_a_key" not in rows["refused"]


def test_resume_keeps_every_row_once(tmp_path):
    sink = make_sink(tmp_path)
    done = FakeTrial("done", {**BASE, "normaliser.kind": "none", "epochs": 2})
    feed(sink, done, [1, 2])
    sink.on_trial_complete(0, [], done)
    running = FakeTrial("run", {**BASE, "normaliser.kind": "xbn"})
    feed(sink, running, [1, 2, 3])

    # the driver dies; the restored trial continues from its checkpoint at epoch 2 and re-reports epoch 3
    resumed = make_sink(tmp_path)
    running = FakeTrial("run", running.config)
    feed(resumed, running, [3, 4], {3: 0.9, 4: 0.95})
    resumed.on_trial_complete(0, [], running)

    epochs = pq.read_table(tmp_path / "epochs" / "run.parquet").to_pandas()
    assert epochs["epoch"].tolist() == [1, 2, 3, 4]
    assert epochs.loc[epochs.epoch == 3, "recall_at_1"].item() == 0.9  # the new value replaced the old
    trials = pq.read_table(tmp_path / "trials.parquet").to_pandas().set_index("trial_id")
    assert sorted(trials.index) == ["done", "run"]
    assert trials.loc["done", "status"] == "completed" and trials.loc["run", "epochs_completed"] == 4


def test_a_failed_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    sink = make_sink(tmp_path)
    trial = FakeTrial("t1", {**BASE, "normaliser.kind": "none"})
    feed(sink, trial, [1, 2])
    before = (tmp_path / "epochs" / "t1.parquet").read_bytes()

    def torn_write(fs, path, payload):
        with fs.open_output_stream(path) as out:
            out.write(payload[: len(payload) // 2])
        raise OSError("disk full")

    monkeypatch.setattr(location, "write_stream", torn_write)
    with pytest.raises(OSError, match="disk full"):
        sink.on_trial_result(0, [], trial, result(3, 0.7))
    assert (tmp_path / "epochs" / "t1.parquet").read_bytes() == before
    assert pq.read_table(tmp_path / "epochs" / "t1.parquet").num_rows == 2
    assert sorted(p.name for p in (tmp_path / "epochs").iterdir()) == ["t1.parquet"]  # no temporary left


def test_files_read_as_they_are_with_four_libraries(tmp_path):
    polars = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    sink = make_sink(tmp_path)
    for i, kind in enumerate(["none", "pcxbn", "xbn"]):
        config = {**BASE, "normaliser.kind": kind, "normaliser.lambda_mu": 0.3 if kind == "pcxbn" else None}
        trial = FakeTrial(f"t{i}", config)
        feed(sink, trial, range(1, 2 + i))
        sink.on_trial_complete(0, [], trial)
    epochs_glob = str(tmp_path / "epochs" / "*.parquet")
    trials_path = str(tmp_path / "trials.parquet")

    assert len(pd.read_parquet(tmp_path / "epochs")) == 6
    assert pq.read_table(tmp_path / "epochs").num_rows == 6
    assert polars.read_parquet(epochs_glob).height == 6
    assert duckdb.sql(f"select count(*) from read_parquet('{epochs_glob}')").fetchall()[0][0] == 6
    assert duckdb.sql(f"select count(*) from '{trials_path}' where status = 'stopped_early'").fetchall()[0][0] == 3
    frame = polars.read_parquet(trials_path)
    assert frame.schema["epochs_completed"] == polars.Int64
    assert frame.filter(polars.col("config.normaliser.kind") == "pcxbn")["config.normaliser.lambda_mu"][0] == 0.3
    assert pd.read_parquet(trials_path)["config.normaliser.lambda_mu"].isna().sum() == 2


def test_storage_uri_and_json(tmp_path):
    store = Folder(f"file://{tmp_path}/deep/results")
    store.write_json("sweep.json", {"metric": "recall_at_1"})
    store.write_table("trials.parquet", parquet.build_table([{"trial_id": "a", "epoch": 2.0}],
                                                            [pa.field("trial_id", pa.string()),
                                                             pa.field("epoch", pa.int64())]))
    assert store.read_json("sweep.json") == {"metric": "recall_at_1"}
    assert store.read_table("trials.parquet").to_pylist() == [{"trial_id": "a", "epoch": 2}]
    assert store.list("") == ["trials.parquet"]
    assert (tmp_path / "deep" / "results" / "sweep.json").is_file()


def test_trials_parquet_is_rewritten_at_most_once_per_interval_and_flushed_at_the_end(tmp_path):
    """Bug caught: trials.parquet rewritten whole at every status change (quadratic in the sweep's size),
    or a throttled change never written (no flush at a step after the interval, nor at the end)."""
    sink = make_sink(tmp_path, interval=3600.0)
    first, second = (FakeTrial(t, {**BASE, "normaliser.kind": "none", "epochs": 2}) for t in ("a", "b"))
    feed(sink, first, [1])  # the first event writes at once
    feed(sink, second, [1, 2])
    sink.on_trial_complete(0, [], second)
    sink.on_step_end(0, [])
    written = pq.read_table(tmp_path / "trials.parquet").to_pylist()
    assert [(r["trial_id"], r["status"], r["epochs_completed"]) for r in written] == [("a", "running", 0)]
    assert pq.read_table(tmp_path / "epochs" / "b.parquet").num_rows == 2  # epoch rows are never held back

    sink.trials_interval_s = 0.0  # the interval has passed: the next step writes what changed
    sink.on_step_end(1, [])
    rows = {r["trial_id"]: r for r in pq.read_table(tmp_path / "trials.parquet").to_pylist()}
    assert rows["b"]["status"] == "completed" and rows["a"]["epochs_completed"] == 1

    sink.trials_interval_s = 3600.0
    feed(sink, first, [2])
    sink.on_trial_complete(0, [], first)
    sink.on_experiment_end([])
    rows = {r["trial_id"]: r for r in pq.read_table(tmp_path / "trials.parquet").to_pylist()}
    assert rows["a"]["status"] == "completed" and rows["a"]["epochs_completed"] == 2


def test_trials_parquet_rewritten_from_its_last_table_equals_a_whole_rebuild(tmp_path):
    """Bug caught: trials.parquet rebuilt from the table written last time (only changed rows converted)
    with a row left stale, taken from the wrong position, duplicated or reordered, or kept under the old
    schema when a late metric adds a column. Each write must equal the table built from every row."""
    sink = make_sink(tmp_path)
    trials = [FakeTrial(t, {**BASE, "normaliser.kind": "none", "epochs": 3}) for t in ("a", "b", "c", "d")]

    def written_equals_rebuilt():
        table = pq.read_table(tmp_path / "trials.parquet")
        rebuilt = parquet.build_table(list(sink.trials.values()), sink.trial_fields())
        assert table.schema.remove_metadata() == rebuilt.schema
        pd.testing.assert_frame_equal(table.to_pandas(), rebuilt.to_pandas())
        return table

    feed(sink, trials[0], [1])
    feed(sink, trials[1], [1, 2])
    written_equals_rebuilt()
    feed(sink, trials[2], [1])                      # a new row after unchanged ones
    sink.on_trial_result(0, [], trials[0], result(2, 0.9))  # a change to the first row only
    written_equals_rebuilt()
    sink.on_trial_result(0, [], trials[1], result(3, 0.5, test_recall_at_1=0.4))  # not a trials column: same schema
    feed(sink, trials[3], [1, 2, 3])
    sink.on_trial_complete(0, [], trials[3])
    sink.on_trial_complete(0, [], trials[1])
    table = written_equals_rebuilt()
    assert table.column("trial_id").to_pylist() == ["a", "b", "c", "d"]
    assert table.column("status").to_pylist() == ["running", "completed", "running", "completed"]
    assert table.column("best_recall_at_1").to_pylist() == pytest.approx([0.9, 0.5, 0.1, 0.3])

    sink.metric = "test_recall_at_1"  # a summary column appears: the cached table's schema is stale
    sink.on_trial_complete(0, [], trials[1])
    table = written_equals_rebuilt()
    assert table.column("best_test_recall_at_1").to_pylist() == [None, 0.4, None, None]

    sink = make_sink(tmp_path)  # resumed: the file read back is the table written last
    sink.metric = "test_recall_at_1"
    sink.on_trial_complete(0, [], trials[2])  # stopped early, from the rows read back
    table = written_equals_rebuilt()
    assert table.column("status").to_pylist() == ["running", "completed", "stopped_early", "completed"]


def test_a_resumed_sink_completes_trials_the_killed_driver_had_not_written(tmp_path):
    """Bug caught: a trial that finished (or errored) in the last interval before the driver was killed
    stays ``running`` forever, since Tune restores it as finished and sends no more events for it; or a
    restored trial's row summarised without the wall time of the last result Tune restored with it."""
    sink = make_sink(tmp_path, interval=3600.0)
    done = FakeTrial("done", {**BASE, "normaliser.kind": "none"})
    early = FakeTrial("early", {**BASE, "normaliser.kind": "xbn"})
    crash = FakeTrial("crash", {**BASE, "normaliser.kind": "xbn"}, error="Traceback\nRuntimeError: boom")
    unfinished = FakeTrial("unfinished", {**BASE, "normaliser.kind": "xbn"})
    for trial, epochs in ((done, [1, 2, 3, 4]), (early, [1, 2]), (crash, [1]), (unfinished, [1, 2])):
        feed(sink, trial, epochs)
    sink.on_trial_complete(0, [], done)  # throttled: the driver is killed before trials.parquet has it
    assert {r["status"] for r in pq.read_table(tmp_path / "trials.parquet").to_pylist()} == {"running"}

    resumed = make_sink(tmp_path, interval=3600.0)
    for trial, status in ((done, "TERMINATED"), (early, "TERMINATED"), (crash, "ERROR"), (unfinished, "PENDING")):
        trial.status = status
    crash.num_failures = 3
    resumed.on_step_begin(0, [done, early, crash, unfinished])
    resumed.on_trial_start(0, [], unfinished)  # Tune restarts the unfinished one from its checkpoint
    resumed.on_experiment_end([])
    rows = {r["trial_id"]: r for r in pq.read_table(tmp_path / "trials.parquet").to_pylist()}
    assert rows["done"]["status"] == "completed" and rows["done"]["epochs_completed"] == 4
    assert rows["done"]["best_recall_at_1"] == pytest.approx(0.4) and rows["done"]["best_epoch"] == 4
    assert rows["early"]["status"] == "stopped_early"
    assert rows["early"]["stop_reason"] == "stopped by the scheduler after 2/4 epochs"
    assert rows["crash"]["status"] == "failed" and rows["crash"]["error"] == "RuntimeError: boom"
    assert rows["crash"]["retries"] == 3
    assert rows["unfinished"]["status"] == "running" and rows["unfinished"]["epochs_completed"] == 2
    # the wall time comes with the trial Tune restored (its last result), not only with a new result
    assert [rows[t]["wall_time_s"] for t in ("done", "crash", "unfinished")] == [8.0, 2.0, 4.0]


def test_epoch_file_appends_and_rebuilds_when_the_schema_grows(tmp_path):
    """Bug caught: the cached epoch table appended a row under a stale schema (a metric first reported
    at a later epoch, e.g. test_* with evaluate_test) or after a restored trial re-reported an epoch."""
    sink = make_sink(tmp_path)
    trial = FakeTrial("t1", {**BASE, "normaliser.kind": "none"})
    feed(sink, trial, [1, 2])
    sink.on_trial_result(0, [], trial, result(3, 0.3, test_recall_at_1=0.25))
    sink.on_trial_result(0, [], trial, result(4, 0.4, test_recall_at_1=0.35))
    sink.on_trial_result(0, [], trial, result(3, 0.33, test_recall_at_1=0.3))  # restored from epoch 2
    table = pq.read_table(tmp_path / "epochs" / "t1.parquet")
    assert table.column("epoch").to_pylist() == [1, 2, 3, 4]
    assert table.column("test_recall_at_1").to_pylist() == [None, None, 0.3, 0.35]
    assert table.column("recall_at_1").to_pylist() == pytest.approx([0.1, 0.2, 0.33, 0.4])
    rebuilt = parquet.build_table([sink.epochs["t1"][e] for e in (1, 2, 3, 4)], sink.epoch_fields())
    assert table.schema.remove_metadata() == rebuilt.schema
    pd.testing.assert_frame_equal(table.to_pandas(), rebuilt.to_pandas())


def test_collapsed_epochs_are_counted_per_trial_and_each_logs_one_warning(tmp_path, caplog):
    """Bug caught: a trial whose loss saw no positive pair in some epochs looking healthy in trials.parquet,
    or the sweep's console staying quiet about it (issue 8); and the warning printed to stdout, where a
    notebook's logging settings could neither silence nor route it (issue 55): it is a record of the sink's
    logger at WARNING, which a handler the test installs (caplog) receives."""
    sink = make_sink(tmp_path)
    trial = FakeTrial("t1", {"normaliser.kind": "xbn"})
    sink.on_trial_start(0, [], trial)
    with caplog.at_level(logging.INFO, logger="tune.results.sink"):
        for epoch, positives in ((1, 12.0), (2, 0.0), (3, 0.0)):
            res = result(epoch, 0.1, loss_pos_pairs=positives, reference_raw_recall_at_1=0.435)
            trial.last_result = res
            sink.on_trial_result(0, [], trial, res)
    sink.on_experiment_end([trial])
    row = pd.read_parquet(tmp_path / "trials.parquet").iloc[0]
    assert row["collapsed_epochs"] == 2 and row["reference_raw_recall_at_1"] == 0.435
    assert str(pq.read_schema(tmp_path / "trials.parquet").field("collapsed_epochs").type) == "int64"
    warnings = [(r.name, r.getMessage()) for r in caplog.records if r.levelno == logging.WARNING]
    assert [(name, message.split(" collapsed:")[0]) for name, message in warnings] == [
        ("tune.results.sink", "trial t1: epoch 2"), ("tune.results.sink", "trial t1: epoch 3")]
    assert "warning" not in warnings[0][1]   # the level is the record's, not words in its text


def test_without_results_dir_the_sink_writes_next_to_the_experiment_on_its_filesystem(tmp_path, monkeypatch):
    """Bug caught: with no ``results_dir``, the files written anywhere but ``<experiment>/results`` on the
    trial's own storage filesystem (a bucket's sweep written to the driver's disk, the folder's name cut or
    a doubled slash, a different key on a bucket), ``results/epochs/`` missing until the first epoch
    (analysis.load then reports a started sweep's epoch rows as missing), or the restored sink, opened by
    Tune's first step through its trials, failing on a step without trials or with a single trial."""
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # a sink that ignored the trial's filesystem would write here
    bucket = pafs.SubTreeFileSystem(str(tmp_path / "bucket"), pafs.LocalFileSystem())
    trial = FakeTrial("t1", {**BASE, "normaliser.kind": "none", "epochs": 1})
    trial.storage = SimpleNamespace(experiment_fs_path="sweep_X/", storage_filesystem=bucket)
    sink = ParquetSink(None, "exp", "recall_at_1", "max")
    sink.trials_interval_s = 0.0
    sink.setup()
    sink.on_step_begin(0, [])  # Tune's first steps can come before the searcher made any trial
    sink.on_trial_start(0, [], trial)
    results = tmp_path / "bucket" / "sweep_X" / "results"
    assert (results / "epochs").is_dir() and not list((results / "epochs").iterdir())
    feed(sink, trial, [1])
    sink.on_trial_complete(0, [], trial)
    assert sink.storage.root == "sweep_X/results"
    assert sorted(p.name for p in results.iterdir()) == ["epochs", "trials.parquet"]
    assert pq.read_table(results / "epochs" / "t1.parquet").column("epoch").to_pylist() == [1]
    assert list((tmp_path / "cwd").iterdir()) == []

    resumed = ParquetSink(None, "exp", "recall_at_1", "max")
    resumed.setup()
    trial.status = "TERMINATED"
    resumed.on_step_begin(0, [trial])  # the restored sink opens the folder through its only trial
    assert resumed.trials["t1"]["status"] == "completed" and resumed.epochs["t1"][1]["recall_at_1"] == 0.1


def test_trials_parquet_waits_two_seconds_between_rewrites(tmp_path, monkeypatch):
    """Bug caught: a default interval other than the documented 2 s between trials.parquet rewrites, or a
    change due exactly at the end of the interval held back until a later step."""
    clock = [100.0]
    monkeypatch.setattr(sink_module, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    sink = ParquetSink(str(tmp_path), "exp", "recall_at_1", "max")
    sink.setup()
    trial = FakeTrial("t1", {**BASE, "normaliser.kind": "none"})
    sink.on_trial_start(0, [], trial)  # the first write is at once

    def written():
        return pq.read_table(tmp_path / "trials.parquet").column("epochs_completed").to_pylist()

    clock[0] = 101.999
    sink.on_trial_result(0, [], trial, result(1, 0.1))
    sink.on_step_end(0, [])
    assert written() == [0]
    clock[0] = 102.0
    sink.on_step_end(1, [])
    assert written() == [1]


def test_experiment_end_writes_trials_parquet_only_when_missing_or_changed(tmp_path):
    """Bug caught: a sweep that ended before any trial started left without trials.parquet (readers find no
    table, not an empty one), or the end failing in a sink that never opened its folder."""
    ParquetSink(str(tmp_path / "unused"), "exp", "recall_at_1", "max").on_experiment_end([])
    assert not (tmp_path / "unused").exists()

    sink = make_sink(tmp_path, interval=3600.0)
    pending = FakeTrial("p", {**BASE, "normaliser.kind": "none"})
    pending.status = "PENDING"
    sink.on_step_begin(0, [pending])  # opens the folder; no trial row yet
    assert not (tmp_path / "trials.parquet").exists()
    sink.on_experiment_end([pending])
    table = pq.read_table(tmp_path / "trials.parquet")
    assert table.num_rows == 0 and table.schema.names == [f.name for f in sink.trial_fields()]


def test_each_row_is_converted_once_not_at_every_rewrite(tmp_path, monkeypatch):
    """Bug caught: the cache of cleaned epoch rows missed (every row of a trial converted again at each of
    its results, so a result's cost grows with the trial's epochs; two trials reporting in turn evicting
    each other's rows), trials.parquet rebuilt from every row instead of from the table written last time
    (also after a resume, from the file read back), or a finished trial's cleaned rows kept in the driver."""
    converted = []

    def counting(row, fields):
        converted.append(("trial", row["trial_id"]) if "status" in row else ("epoch", row["trial_id"], row["epoch"]))
        return parquet.clean_row(row, fields)

    monkeypatch.setattr(sink_module, "clean_row", counting)
    sink = make_sink(tmp_path)  # trials.parquet rewritten at every event
    trials = [FakeTrial(t, {**BASE, "normaliser.kind": "none", "epochs": 3}) for t in ("a", "b")]
    for trial in trials:
        sink.on_trial_start(0, [], trial)
    for epoch in (1, 2, 3):
        for trial in trials:
            converted.clear()
            sink.on_trial_result(0, [], trial, result(epoch, 0.1 * epoch))
            assert converted == [("epoch", trial.trial_id, epoch), ("trial", trial.trial_id)]
    converted.clear()
    sink.on_trial_complete(0, [], trials[0])
    assert converted == [("trial", "a")] and "a" not in sink._epoch_values

    resumed = make_sink(tmp_path)
    converted.clear()
    resumed.on_trial_complete(0, [], trials[1])
    assert converted == [("trial", "b")]
    assert pq.read_table(tmp_path / "trials.parquet").column("status").to_pylist() == ["completed"] * 2


def test_epoch_files_are_written_plain(tmp_path):
    """Bug caught: epoch files written with pyarrow's defaults (snappy, dictionary pages, statistics):
    about 25% more driver CPU per result for files of a few dozen rows (benchmarks/bench_sink.py)."""
    sink = make_sink(tmp_path)
    feed(sink, FakeTrial("t1", {**BASE, "normaliser.kind": "none"}), [1, 2])
    meta = pq.ParquetFile(tmp_path / "epochs" / "t1.parquet").metadata
    chunks = [meta.row_group(0).column(i) for i in range(meta.num_columns)]
    assert {c.compression for c in chunks} == {"UNCOMPRESSED"}
    assert not any(c.is_stats_set or c.has_dictionary_page for c in chunks)


def test_a_two_worker_trial_is_one_row_billing_both_workers_gpus(tmp_path):
    """Bug caught (issue 20): a data-parallel trial's gpu_hours read from its Tune placement group, which
    holds only the launcher (0 GPUs), instead of its workers x each one's GPUs; ``workers`` missing from
    trials.parquet or typed float."""
    sink = make_sink(tmp_path, gpus_per_worker=1.0)
    trial = FakeTrial("t2", {**BASE, "normaliser.kind": "none", "normaliser.lambda_mu": None, "workers": 2,
                             "batch_size": 16})
    feed(sink, trial, [1, 2])
    sink.on_trial_complete(0, [], trial)
    table = pq.read_table(tmp_path / "trials.parquet")
    (row,) = table.to_pylist()
    assert table.schema.field("workers").type == pa.int64()
    assert row["workers"] == 2 and row["config.workers"] == 2
    assert row["wall_time_s"] == 4.0 and row["gpu_hours"] == pytest.approx(4.0 * 2 * 1.0 / 3600)
    # a one-worker trial of the same sink: its config has no workers key
    one = FakeTrial("t1", {**BASE, "normaliser.kind": "none", "normaliser.lambda_mu": None})
    feed(sink, one, [1])
    sink.on_trial_complete(0, [], one)
    rows = {r["trial_id"]: r for r in pq.read_table(tmp_path / "trials.parquet").to_pylist()}
    assert rows["t1"]["workers"] == 1 and rows["t1"]["gpu_hours"] == pytest.approx(2.0 * 1.0 / 3600)


def test_the_trial_row_carries_its_training_fraction_and_its_exploits(tmp_path):
    """Bugs caught (before, only slow Ray sweeps checked them): ``train_fraction`` not the epochs' summed
    ``train_s`` over the trial's wall time, or left empty; population-based training's exploits (donor@epoch,
    in order) not joined into the trial's ``exploits`` cell, or put in another trial's row; a summary that
    ignores the sink's extra metrics."""
    exploits = {"t1": ["t0@2", "t3@4"]}
    sink = make_sink(tmp_path, exploits=exploits, extra={"loss": "min"})
    trial, other = FakeTrial("t1", {**BASE, "epochs": 2}), FakeTrial("t2", {**BASE, "epochs": 2})
    for t in (trial, other):
        sink.on_trial_start(0, [], t)
        for epoch in (1, 2):
            res = result(epoch, 0.1 * epoch, train_s=1.5 * epoch)
            t.last_result = res
            sink.on_trial_result(0, [], t, res)
        sink.on_trial_complete(0, [], t)
    rows = {row["trial_id"]: row for row in pq.read_table(tmp_path / "trials.parquet").to_pylist()}
    assert rows["t1"]["train_s"] == 4.5 and rows["t1"]["wall_time_s"] == 4.0
    assert rows["t1"]["train_fraction"] == pytest.approx(4.5 / 4.0)
    assert rows["t1"]["exploits"] == "t0@2; t3@4" and rows["t2"]["exploits"] is None
    assert rows["t1"]["best_loss"] == 0.5 and rows["t1"]["status"] == "completed"
