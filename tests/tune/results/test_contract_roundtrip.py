"""The results contract end to end without Ray: the Parquet sink writes a sweep, ``analysis.load`` reads it, and
every column keeps the type ``analysis.contract`` declares, the columns declared for later work included;
and each rule of the contract has one definition that both sides use."""
from __future__ import annotations

import math
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import analysis
from analysis import contract, loader
from analysis.contract import SpaceRecord, SweepRecord
from analysis.location import Folder
from tune.results import parquet, sink as sink_module
from tune.results.record import write_record

from .test_sink import BASE, FakeTrial, make_sink, result

PANDAS = {pa.int64(): "Int64", pa.string(): "string", pa.float64(): "float64"}
# what a trainable reports per epoch under the contract's names (issue 18, 19, 17's skip): t2 on a GPU
TIMES = {  # epoch -> (train_s, data_wait_s, eval_s, checkpoint_s, gpu_memory_peak_gib, skipped_images)
    1: (1.5, 0.25, 0.5, 0.125, 3.5, 1),
    2: (1.25, 0.5, math.nan, 0.0, 3.75, 0),  # an epoch without evaluation (eval_every): eval_s NaN
    3: (1.75, 0.25, 0.5, 0.25, 4.0, 0),
}


def feed_timed(sink, trial: FakeTrial, gpu: bool) -> None:
    sink.on_trial_start(0, [], trial)
    for epoch, (train, wait, evaluate, checkpoint, peak, skipped) in TIMES.items():
        recall = math.nan if epoch == 3 else 0.2 * epoch  # epoch 3 not evaluated: final is epoch 2's
        res = result(epoch, recall, train_s=train, data_wait_s=wait, eval_s=evaluate, checkpoint_s=checkpoint,
                     setup_s=0.5, gpu_memory_peak_gib=peak if gpu else None, skipped_images=skipped,
                     best_weights=f"s3://bucket/sweep/{trial.trial_id}/best" if gpu else None)
        trial.last_result = res
        sink.on_trial_result(0, [], trial, res)
    sink.on_trial_complete(0, [], trial)
    sink.on_experiment_end([])


def written_sweep(tmp_path):
    folder = tmp_path / "sweep"
    sink = make_sink(folder / "results")
    feed_timed(sink, FakeTrial("t1", {**BASE, "normaliser.kind": "none", "epochs": 3}), gpu=False)
    feed_timed(sink, FakeTrial("t2", {**BASE, "normaliser.kind": "xbn", "epochs": 3}, gpus=0.5), gpu=True)
    write_record(str(folder / "results"), SweepRecord(experiment="exp", space=SpaceRecord(
        name="s", params={"normaliser.kind": {"choice": ["none", "xbn"]}})))
    return folder


def test_sink_to_loader_keeps_every_declared_type_and_the_time_sums(tmp_path):
    """Bugs caught: a column whose type depends on the first value written (the loader then reads Int64 in
    one sweep and float64 in another), a declared column missing from a file because no trial reported it
    yet (``gpu_memory_peak_gib`` on the CPU), the trial sums not the sums of the epoch rows, a NaN epoch time
    poisoning a sum, ``train_fraction`` not train_s / wall_time_s, ``setup_s`` or ``best_weights`` lost on
    the way to trials.parquet, ``final_`` read from an epoch without evaluation."""
    folder = written_sweep(tmp_path)
    for path in [folder / "results" / "trials.parquet", *(folder / "results" / "epochs").glob("*.parquet")]:
        schema = pq.read_schema(path)
        for name in schema.names:
            declared = name in contract.INT_COLUMNS | contract.STRING_COLUMNS | contract.FLOAT_COLUMNS
            if declared:
                assert schema.field(name).type == contract.column_type(name), (path.name, name)
    epoch_names = pq.read_schema(folder / "results" / "epochs" / "t1.parquet").names
    assert set(contract.EPOCH_DECLARED) <= set(epoch_names)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sweep = analysis.load(folder)
    for frame in (sweep.trials, sweep.epochs):
        for name in frame.columns:
            if name in contract.INT_COLUMNS | contract.STRING_COLUMNS | contract.FLOAT_COLUMNS:
                assert str(frame[name].dtype) == PANDAS[contract.column_type(name)], name
    assert str(sweep.epochs["gpu_memory_peak_gib"].dtype) == "float64"
    assert str(sweep.epochs["skipped_images"].dtype) == "Int64"

    t = sweep.trials.set_index("trial_id")
    assert t.loc["t2", "train_s"] == 1.5 + 1.25 + 1.75
    assert t.loc["t2", "data_wait_s"] == 1.0 and t.loc["t2", "eval_s"] == 1.0
    assert t.loc["t2", "checkpoint_s"] == 0.375 and t.loc["t2", "setup_s"] == 0.5
    assert t.loc["t2", "wall_time_s"] == 6.0  # Tune's time_total_s at epoch 3 (test_sink.result)
    assert t.loc["t2", "train_fraction"] == pytest.approx(4.5 / 6.0)
    assert t.loc["t2", "best_weights"] == "s3://bucket/sweep/t2/best"
    assert t.loc["t2", "final_recall_at_1"] == pytest.approx(0.4) and t.loc["t2", "best_epoch"] == 2
    assert t.loc["t1", "train_fraction"] == pytest.approx(0.75)
    e = sweep.epochs.set_index(["trial_id", "epoch"])
    assert e["gpu_memory_peak_gib"].loc["t1"].isna().all()
    assert list(e["gpu_memory_peak_gib"].loc["t2"]) == [3.5, 3.75, 4.0]
    assert list(e["skipped_images"].loc["t2"]) == [1, 0, 0]
    assert sweep.record.swept == ("normaliser.kind",)


def test_each_rule_has_one_definition():
    """Bug caught: the integer columns, the config prefix, the finiteness test or the retry count copied
    into tune and analysis again, where the copies drift (6 integer columns on one side, 4 on the other;
    5 read attempts against 3)."""
    assert parquet.INT_COLUMNS is contract.INT_COLUMNS and loader.INT_COLUMNS is contract.INT_COLUMNS
    assert parquet.finite is contract.finite and parquet.config_of is contract.config_of
    from analysis import columns

    assert parquet.CONFIG_PREFIX is contract.CONFIG_PREFIX and columns.CONFIG_PREFIX is contract.CONFIG_PREFIX
    assert not hasattr(parquet, "READ_ATTEMPTS") and not hasattr(loader, "_READ_ATTEMPTS")
    assert not hasattr(sink_module, "ALWAYS_SUMMARISED")


def test_sink_and_loader_summarise_with_the_same_function(tmp_path, monkeypatch):
    """Bug caught: the loader's fallback (trials known only from their epoch rows) and the sink summarising
    a trial by two rules (a literal metric list on one side; final taken from the last row on one side and
    from the last finite value on the other)."""
    calls = []
    original = contract.summarise

    def spy(rows, metric, mode, extra=None):  # extra: a several-objective sweep's other metrics
        calls.append((len(rows), metric, mode))
        return original(rows, metric, mode, extra)

    monkeypatch.setattr(contract, "summarise", spy)
    folder = written_sweep(tmp_path)
    assert calls and {c[1:] for c in calls} == {("recall_at_1", "max")}
    calls.clear()
    (folder / "results" / "trials.parquet").unlink()  # the loader must derive every trial from its epochs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sweep = analysis.load(folder)
    assert sorted(calls) == [(3, "recall_at_1", "max"), (3, "recall_at_1", "max")]
    assert sweep.trials.set_index("trial_id").loc["t2", "train_s"] == 4.5


def test_a_truncated_results_file_is_named_by_storage(tmp_path):
    """Bug caught: a truncated trials.parquet read as "Could not open Parquet input source '<Buffer>'",
    naming no file."""
    folder = written_sweep(tmp_path)
    path = folder / "results" / "trials.parquet"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(contract.UnreadableFileError, match=str(path)):
        Folder(str(folder / "results")).read_table("trials.parquet")
