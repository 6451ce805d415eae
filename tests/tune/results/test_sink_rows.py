"""What the sink's rows say, hook by hook: the contract's columns in order, best/final summaries in the
metric's direction, relocated paths, retry and error rows (status, reason, message), and the rows a
resumed sink keeps. Fake trials and results come from test_sink.py."""
from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

from analysis.contract import EPOCH_DECLARED
from tune.results import parquet
from tune.results.sink import ParquetSink

from .test_sink import BASE, FakeTrial, feed, make_sink, result

METRIC_COLUMNS = ["recall_at_1", "map_at_r", "loss", "lr", "eval_split", "drift_mean"]  # those of result()


def trial_rows(folder) -> dict[str, dict]:
    return {r["trial_id"]: r for r in pq.read_table(folder / "trials.parquet").to_pylist()}


def test_epoch_and_trial_rows_carry_the_contract_columns_in_order(tmp_path):
    """Bug caught: an epoch row missing ``experiment``/``stage``/``trial_id``/``epoch`` or their place
    ahead of the metrics (a renamed key becomes a stray column and leaves the contract's null), the
    node/GPU columns missing from a trial that never had a GPU, or a trial row without its ``trial_name`` or with
    ``retries`` not starting at 0."""
    sink = make_sink(tmp_path, stage="confirm")
    feed(sink, FakeTrial("t1", {**BASE, "normaliser.kind": "none"}), [1, 2])

    epochs = pq.read_table(tmp_path / "epochs" / "t1.parquet")
    names = [n for n in epochs.schema.names if not n.startswith(parquet.CONFIG_PREFIX)]
    assert names == ["experiment", "stage", "trial_id", "epoch", "node_id", "gpu_ids", *METRIC_COLUMNS,
                     *EPOCH_DECLARED]
    assert epochs.schema.names[len(names):] == [f.name for f in parquet.config_fields()]
    assert epochs.select(["experiment", "stage", "trial_id", "epoch", "node_id", "gpu_ids"]).to_pylist() == [
        {"experiment": "exp", "stage": "confirm", "trial_id": "t1", "epoch": e, "node_id": "n1", "gpu_ids": None}
        for e in (1, 2)]
    assert str(epochs.schema.field("gpu_ids").type) == "string"

    row = trial_rows(tmp_path)["t1"]
    assert row["trial_name"] == "t1_name" and row["retries"] == 0 and row["stage"] == "confirm"


def test_a_minimised_metric_is_summarised_downward_and_the_others_upward(tmp_path):
    """Bug caught: best_<metric> and best_epoch of a ``mode=min`` sweep taken as a maximum, recall_at_1 /
    map_at_r (always higher is better) taken in the sweep's direction, or best_epoch read from another
    metric than the sweep's."""
    sink = ParquetSink(str(tmp_path), "exp", "loss", "min")
    sink.trials_interval_s = 0.0
    sink.setup()
    trial = FakeTrial("t1", {**BASE, "normaliser.kind": "none", "epochs": 3})
    sink.on_trial_start(0, [], trial)
    for epoch, loss, recall in ((1, 0.9, 0.1), (2, 0.3, 0.2), (3, 0.5, 0.4)):
        sink.on_trial_result(0, [], trial, result(epoch, recall, loss=loss))
    row = trial_rows(tmp_path)["t1"]
    assert (row["best_loss"], row["best_epoch"], row["final_loss"]) == (0.3, 2, 0.5)
    assert (row["best_recall_at_1"], row["best_map_at_r"]) == (0.4, 0.2)


def test_best_epoch_is_the_first_epoch_reaching_the_best_value(tmp_path):
    """Bug caught: on a tie, best_epoch names the later epoch (the pairs compared whole, epoch included),
    not the first epoch the best value was reached at."""
    sink = make_sink(tmp_path)
    feed(sink, FakeTrial("t1", {**BASE, "normaliser.kind": "none"}), [1, 2, 3, 4], {1: 0.2, 2: 0.5, 3: 0.5, 4: 0.3})
    row = trial_rows(tmp_path)["t1"]
    assert (row["best_recall_at_1"], row["best_epoch"]) == (0.5, 2)


def test_a_cpu_trial_costs_no_gpu_hours(tmp_path):
    """Bug caught: a trial whose resources name no GPU at all (Ray leaves the key out) failing the summary
    or counted as one GPU."""
    sink = make_sink(tmp_path)
    trial = FakeTrial("t1", {**BASE, "normaliser.kind": "none"})
    trial.placement_group_factory.required_resources = {"CPU": 1.0}
    feed(sink, trial, [1, 2])
    row = trial_rows(tmp_path)["t1"]
    assert row["wall_time_s"] == 4.0 and row["gpu_hours"] == 0.0


def test_relocated_paths_replace_the_config_columns_from_that_result_on(tmp_path):
    """Bug caught: a resumed trial that read its data from a moved folder (``relocated`` in its result)
    still written with the old path in its later epoch rows and in trials.parquet."""
    sink = make_sink(tmp_path)
    trial = FakeTrial("t1", {**BASE, "normaliser.kind": "none", "data_root": "/old"})
    sink.on_trial_start(0, [], trial)
    sink.on_trial_result(0, [], trial, result(1, 0.1))
    sink.on_trial_result(0, [], trial, result(2, 0.2, relocated={"data_root": "/new"}))
    sink.on_trial_result(0, [], trial, result(3, 0.3))
    epochs = pq.read_table(tmp_path / "epochs" / "t1.parquet")
    assert epochs.column("config.data_root").to_pylist() == ["/old", "/new", "/new"]
    assert trial_rows(tmp_path)["t1"]["config.data_root"] == "/new"


def test_a_text_column_first_reported_null_is_typed_by_its_first_value(tmp_path):
    """Bug caught: a column typed from a null first value (as float64), so the text it reports later fails
    to convert and the result's epoch row is lost."""
    sink = make_sink(tmp_path)
    trial = FakeTrial("t1", {**BASE, "normaliser.kind": "none"})
    sink.on_trial_start(0, [], trial)
    sink.on_trial_result(0, [], trial, result(1, 0.1, eval_split=None))
    sink.on_trial_result(0, [], trial, result(2, 0.2))
    epochs = pq.read_table(tmp_path / "epochs" / "t1.parquet")
    assert str(epochs.schema.field("eval_split").type) == "string"
    assert epochs.column("eval_split").to_pylist() == [None, "test"]


def test_retry_and_error_rows_say_why_with_the_exceptions_own_message(tmp_path):
    """Bug caught: a retried or failed trial's row without its exact reason or count, the message read from
    storage (still empty then) instead of the driver's error.txt, the traceback's second line taken for its
    last, a message not capped at 2,000 characters, a blank error.txt failing the hook, or a trial that
    completes after a retry keeping the retry's reason and error."""
    sink = make_sink(tmp_path)
    retried = FakeTrial("retried", {**BASE, "normaliser.kind": "none"})
    retried.error_file = str(tmp_path / "error.txt")  # the driver's copy; storage has none yet
    (tmp_path / "error.txt").write_text("Traceback (most recent call last):\n  File \"x.py\"\nRuntimeError: boom\n\n")
    retried.num_failures = 1
    sink.on_trial_recover(0, [], retried)  # failed as its actor started: the row's first event
    row = trial_rows(tmp_path)["retried"]
    assert (row["status"], row["retries"], row["epochs_completed"]) == ("running", 1, 0)
    assert row["stop_reason"] == "retrying from the last checkpoint (failure 1)"
    assert row["error"] == "RuntimeError: boom"
    feed(sink, retried, [1, 2, 3, 4])
    sink.on_trial_complete(0, [], retried)
    row = trial_rows(tmp_path)["retried"]
    assert (row["status"], row["stop_reason"], row["error"]) == ("completed", "reached the epoch budget (4)", None)

    long = "ValueError: " + "y" * 3000
    failed = FakeTrial("failed", {**BASE, "normaliser.kind": "none"}, error=f"Traceback\n  File \"x.py\"\n{long}")
    failed.error_file = str(tmp_path / "not-there.txt")  # no driver copy: read from storage
    failed.num_failures = 2
    sink.on_trial_error(0, [], failed)
    row = trial_rows(tmp_path)["failed"]
    assert row["stop_reason"] == "error after 2 failure(s) (max_failures exhausted)"
    assert row["error"] == long[:2000]

    blank = FakeTrial("blank", {**BASE, "normaliser.kind": "none"}, error="\n  \n")
    blank.num_failures = 1
    sink.on_trial_recover(0, [], blank)
    assert trial_rows(tmp_path)["blank"]["error"] is None


def test_a_trial_stopped_before_any_result_counts_zero_epochs_of_its_budget(tmp_path):
    """Bug caught: a trial Tune stops before it reports (a pending trial at the sweep's end) counted as one
    epoch done, or its budget not read from TrainConfig's default when the config names no ``epochs``."""
    sink = make_sink(tmp_path)
    sink.on_trial_complete(0, [], FakeTrial("t1", {"normaliser.kind": "xbn"}))
    row = trial_rows(tmp_path)["t1"]
    assert (row["status"], row["epochs_completed"]) == ("stopped_early", 0)
    assert row["stop_reason"] == "stopped by the scheduler after 0/50 epochs"


def test_a_restarted_failed_trial_runs_again_once_it_reports_or_retries(tmp_path):
    """Bug caught: a failed trial that ``resume`` restarts (``resume_errored``) still written ``failed``
    while it trains again: from Tune's start event, after its first new result, or after its next retry."""
    sink = make_sink(tmp_path)
    trials = [FakeTrial(t, {**BASE, "normaliser.kind": "none"}, error="Traceback\nRuntimeError: boom")
              for t in ("reports", "retries")]
    for trial in trials:
        feed(sink, trial, [1])
        trial.num_failures = 3
        sink.on_trial_error(0, [], trial)

    resumed = make_sink(tmp_path)
    for trial in trials:
        resumed.on_trial_start(0, [], trial)
    assert {row["status"] for row in resumed.trials.values()} == {"running"}
    resumed.on_trial_result(0, [], trials[0], result(2, 0.2))
    trials[1].num_failures = 4
    resumed.on_trial_recover(0, [], trials[1])
    rows = trial_rows(tmp_path)
    assert rows["reports"]["status"] == "running" and rows["reports"]["epochs_completed"] == 2
    assert rows["retries"]["status"] == "running" and rows["retries"]["retries"] == 4


def test_a_resumed_sink_keeps_the_finished_rows_the_killed_driver_wrote(tmp_path):
    """Bug caught: the reconciliation on resume redoing trials already written as finished: a trial stopped
    early losing the scheduler's reason (the resumed scheduler has none), a failed trial's error erased
    when its error.txt never reached storage, or trials.parquet rewritten though nothing changed."""
    reasons = {}
    sink = make_sink(tmp_path, stop_reasons=reasons)
    early = FakeTrial("early", {**BASE, "normaliser.kind": "none"})
    crash = FakeTrial("crash", {**BASE, "normaliser.kind": "xbn"}, error="Traceback\nRuntimeError: boom")
    feed(sink, early, [1, 2])
    reasons["early"] = "asha: recall_at_1=0.2 below the rung cutoff at epoch 2"
    sink.on_trial_complete(0, [], early)
    feed(sink, crash, [1])
    crash.num_failures = 3
    sink.on_trial_error(0, [], crash)
    written = os.stat(tmp_path / "trials.parquet").st_ino

    resumed = make_sink(tmp_path)
    early.status, crash.status = "TERMINATED", "ERROR"
    crash._error = None  # the restored trial's error.txt is not on storage
    resumed.on_step_begin(0, [early, crash])
    resumed.on_experiment_end([early, crash])
    rows = trial_rows(tmp_path)
    assert rows["early"]["stop_reason"] == "asha: recall_at_1=0.2 below the rung cutoff at epoch 2 after 2/4 epochs"
    assert rows["crash"]["status"] == "failed" and rows["crash"]["error"] == "RuntimeError: boom"
    assert os.stat(tmp_path / "trials.parquet").st_ino == written


def test_kalman_gain_is_a_declared_float_column_null_for_other_normalisers(tmp_path):
    """Bug caught: ``kalman_gain`` left out of an epoch file whose trial never reports it (a sweep of kinds
    then concatenates files with and without the column), or typed by its first value."""
    sink = make_sink(tmp_path)
    feed(sink, FakeTrial("t1", {**BASE, "normaliser.kind": "none"}), [1])
    axbn = FakeTrial("t2", {**BASE, "normaliser.kind": "axbn"})
    sink.on_trial_start(0, [], axbn)
    sink.on_trial_result(0, [], axbn, result(1, 0.1, kalman_gain=0.75))
    for trial, gain in (("t1", None), ("t2", 0.75)):
        table = pq.read_table(tmp_path / "epochs" / f"{trial}.parquet")
        assert str(table.schema.field("kalman_gain").type) == "double"
        assert table.column("kalman_gain").to_pylist() == [gain]
