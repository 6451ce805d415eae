"""analysis.load on finished, running, crashed and merged sweeps: typed frames, every problem recorded."""
import warnings

import pandas as pd
import pyarrow.parquet as pq
import pytest

from analysis import load
from analysis.loader import SweepReadWarning


def test_finished_sweep_loads_typed_frames_without_problems(finished_sweep):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sweep = load(finished_sweep)
    assert len(sweep.trials) == 28
    assert len(sweep.epochs) == 24 * 4 + 1 + 2 + 1 + 2
    assert sweep.problems == []
    assert sweep.metric == "recall_at_1" and sweep.mode == "max"
    t = sweep.trials
    assert str(t["epochs_completed"].dtype) == "Int64" and str(t["seed"].dtype) == "Int64"
    assert t["config.normaliser.kind"].dtype == "string"
    assert str(t["config.normaliser.centre_only"].dtype) == "boolean"
    assert t["config.normaliser.kalman_r"].dtype == "float64"
    # conditional parameter: null outside its kind
    axbn = t["config.normaliser.kind"] == "axbn"
    assert t.loc[axbn, "config.normaliser.kalman_r"].notna().all()
    assert t.loc[~axbn, "config.normaliser.kalman_r"].isna().all()
    assert str(sweep.epochs["epoch"].dtype) == "Int64"
    assert set(t["variant"]) == {"none", "xbn", "pcxbn", "axbn"}
    assert (sweep.epochs["variant"] == sweep.epochs["config.normaliser.kind"]).all()


def test_results_folder_and_several_sweeps(build_sweep, tmp_path):
    for name in ("a", "b"):
        trials, epochs = build_sweep["finished_rows"](experiment=name)
        build_sweep["write_sweep"](tmp_path / name, trials, epochs)
    assert len(load(tmp_path / "a" / "results").trials) == 28
    both = load([tmp_path / "a", tmp_path / "b"])
    assert len(both.trials) == 56 and both.trials["sweep_dir"].nunique() == 2
    assert set(both.trials["experiment"]) == {"a", "b"}
    assert len(both.paths) == 2


def test_not_a_sweep_folder_names_the_layout(tmp_path):
    with pytest.raises(FileNotFoundError, match="results/"):
        load(tmp_path)
    with pytest.raises(ValueError, match="at least one"):
        load([])


def test_running_sweep_reports_torn_file_and_unknown_trial(running_sweep):
    with pytest.warns(SweepReadWarning, match="2 problem"):
        sweep = load(running_sweep)
    whats = [p.what for p in sweep.problems]
    assert any(p.path.endswith("t3.parquet") and "unreadable" in p.what for p in sweep.problems)
    assert any("'t2'" in w and "derived" in w for w in whats)
    t = sweep.trials.set_index("trial_id")
    assert t.loc["t1", "status"] == "running" and t.loc["t1", "epochs_completed"] == 2
    assert t.loc["t4", "epochs_completed"] == 0 and pd.isna(t.loc["t4", "best_recall_at_1"])
    derived = t.loc["t2"]
    assert derived["status"] == "unknown" and derived["epochs_completed"] == 3
    assert derived["best_recall_at_1"] == pytest.approx(0.5) and derived["best_epoch"] == 3
    assert derived["config.normaliser.lambda_mu"] == pytest.approx(0.6)
    assert "t3" not in set(sweep.epochs["trial_id"])


def test_crashed_sweep_without_trials_table_is_derived_from_epochs(crashed_sweep):
    with pytest.warns(SweepReadWarning):
        sweep = load(crashed_sweep)
    assert any(p.path.endswith("trials.parquet") and "missing" in p.what for p in sweep.problems)
    t = sweep.trials.set_index("trial_id").sort_index()
    assert list(t.index) == ["a", "b"]
    assert list(t["best_recall_at_1"]) == pytest.approx([0.5, 0.7])
    assert list(t["final_recall_at_1"]) == pytest.approx([0.5, 0.7])
    assert list(t["epochs_completed"]) == [3, 2]
    assert list(t["seed"]) == [0, 1]
    assert set(t["status"]) == {"unknown"}


def test_duplicated_epoch_rows_are_reported_and_kept_once(build_sweep, tmp_path):
    b = build_sweep
    cfg = b["config"]("xbn", 0.5, 0)
    rows = b["epoch_rows"]("d", cfg, 0.6, 2)
    folder = b["write_sweep"](tmp_path / "dup", [b["trial_row"]("d", cfg, rows, "completed")], rows + rows[-1:])
    with pytest.warns(SweepReadWarning, match="duplicated"):
        sweep = load(folder)
    assert len(sweep.epochs) == 2


def test_missing_stage_column_and_options(build_sweep, tmp_path):
    b = build_sweep
    cfg = b["config"]("xbn", 0.5, 0)
    rows = [{k: v for k, v in r.items() if k != "stage"} for r in b["epoch_rows"]("s", cfg, 0.6, 2)]
    trial = {k: v for k, v in b["trial_row"]("s", cfg, rows, "completed").items() if k != "stage"}
    folder = b["write_sweep"](tmp_path / "nostage", [trial], rows, options={"metric": "map_at_r", "mode": "max"})
    assert "stage" not in pq.read_schema(folder / "results" / "trials.parquet").names
    with pytest.warns(SweepReadWarning, match="stage"):
        sweep = load(folder)
    assert set(sweep.trials["stage"]) == {"sweep"} and set(sweep.epochs["stage"]) == {"sweep"}
    assert sweep.metric == "map_at_r"


def test_uri_storage(finished_sweep):
    sweep = load(f"file://{finished_sweep}/results")
    assert len(sweep.trials) == 28 and sweep.paths == (str(finished_sweep),)
    assert sweep.locations[0].local == finished_sweep


def test_sweep_json_layout(finished_sweep):
    sweep = load(finished_sweep)
    assert sweep.name == "finished"
    assert sweep.option("grace_period") == 1 and sweep.option("scheduler") == "asha"  # nested CLI options
    assert sweep.option("missing", 7) == 7
    declared = sweep.declared_log_scale()
    assert declared["config.memory.ratio"] is True and declared["config.normaliser.lambda_sigma"] is False


def test_duplicated_trial_rows_are_reported(build_sweep, tmp_path):
    b = build_sweep
    cfg = b["config"]("xbn", 0.5, 0)
    rows = b["epoch_rows"]("d", cfg, 0.6, 2)
    first, second = b["trial_row"]("d", cfg, rows[:1], "running"), b["trial_row"]("d", cfg, rows, "completed")
    folder = b["write_sweep"](tmp_path / "duptrial", [first, second], rows)
    with pytest.warns(SweepReadWarning, match="duplicated trial rows"):
        sweep = load(folder)
    assert len(sweep.trials) == 1 and sweep.trials["status"].iloc[0] == "completed"


def test_epoch_rows_ahead_of_the_trials_table_win(build_sweep, tmp_path):
    """The sink rewrites trials.parquet at most every few seconds, each epoch file at once."""
    b = build_sweep
    cfg = b["config"]("xbn", 0.5, 0)
    rows = b["epoch_rows"]("r", cfg, 0.6, 3)  # R@1 0.2, 0.4, 0.6
    stale = b["trial_row"]("r", cfg, rows[:1], "running")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # normal for a running sweep: not a problem
        sweep = load(b["write_sweep"](tmp_path / "lagging", [stale], rows))
    row = sweep.trials.iloc[0]
    assert row["epochs_completed"] == 3 and row["status"] == "running"
    assert row["best_recall_at_1"] == pytest.approx(0.6) and row["best_epoch"] == 3
    assert row["final_map_at_r"] == pytest.approx(0.3)
    assert str(sweep.trials["epochs_completed"].dtype) == "Int64"


def test_trials_derived_from_epochs_summarise_the_other_objectives_under_their_modes(build_sweep, tmp_path):
    """Bug caught: a trial known only from its epoch rows (no trials.parquet yet, or a row behind them) left
    without ``best_``/``final_`` of the sweep's other objectives (``--metric loss:min`` beside recall_at_1), or
    with them under the sweep metric's max, so its best loss was its worst epoch's."""
    b = build_sweep
    cfg = b["config"]("xbn", 0.5, 0)
    rows = b["epoch_rows"]("r", cfg, 0.6, 3)  # loss 2.0, 1.0, 0.667; R@1 0.2, 0.4, 0.6
    two = {"extra_metrics": ["loss"], "extra_modes": ["min"]}
    with pytest.warns(SweepReadWarning):
        crashed = load(b["write_sweep"](tmp_path / "crashed", [], rows, options=two, write_trials=False))
    stale = b["trial_row"]("r", cfg, rows[:1], "running") | {"best_loss": 2.0, "final_loss": 2.0}
    behind = load(b["write_sweep"](tmp_path / "behind", [stale], rows, options=two))
    for sweep in (crashed, behind):
        row = sweep.trials.iloc[0]
        assert row["best_loss"] == pytest.approx(2 / 3) and row["final_loss"] == pytest.approx(2 / 3)
        assert row["best_recall_at_1"] == pytest.approx(0.6) and row["best_epoch"] == 3
