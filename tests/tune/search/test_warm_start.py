"""tune/search/warm_start.py on a trials.parquet fixture: which old trials fit the new space, and why not."""
from __future__ import annotations

import math

import optuna
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tune.search.spaces import load_space
from tune.search.warm_start import WarmStartError, warm_start_points
from xbm.config import TrainConfig

optuna.logging.set_verbosity(optuna.logging.WARNING)

QUICK = {**TrainConfig().to_dict(), **load_space("quickstart").base}
_ARROW = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}


def trial(trial_id, reward, status="completed", stage="sweep", **config):
    """One trials.parquet row: quickstart's fixed values, then ``config`` (None = absent param)."""
    values = {**QUICK, "normaliser.lambda_mu": None, **{k.replace("__", "."): v for k, v in config.items()}}
    return {"experiment": "old", "stage": stage, "trial_id": trial_id, "status": status, "epochs_completed": 6,
            "error": "NonFiniteLossError" if status == "failed" else None, "best_recall_at_1": reward,
            "final_recall_at_1": reward, **{f"config.{k}": v for k, v in values.items()}}


def write_sweep(tmp_path, rows):
    defaults = TrainConfig().to_dict()
    fields = [pa.field(k, pa.string()) for k in ("experiment", "stage", "trial_id", "status", "error")]
    fields += [pa.field("epochs_completed", pa.int64()), pa.field("best_recall_at_1", pa.float64()),
               pa.field("final_recall_at_1", pa.float64())]
    fields += [pa.field(f"config.{k}", _ARROW[type(v)]) for k, v in defaults.items()]
    table = pa.Table.from_pylist(rows, schema=pa.schema(fields))
    (tmp_path / "old" / "results").mkdir(parents=True)
    pq.write_table(table, tmp_path / "old" / "results" / "trials.parquet")
    return str(tmp_path / "old")


ROWS = [
    trial("keep_pcxbn", 0.61, normaliser__kind="pcxbn", normaliser__lambda_mu=0.3, memory__ratio=0.5),
    trial("keep_xbn", 0.72, normaliser__kind="xbn", memory__ratio=0.2, seed=7, device="cuda"),
    trial("stopped", 0.90, status="stopped_early", normaliser__kind="xbn", memory__ratio=0.2),
    trial("failed", None, status="failed", normaliser__kind="axbn", memory__ratio=0.2),
    trial("confirm", 0.80, stage="confirm", normaliser__kind="xbn", memory__ratio=0.2),
    trial("ratio_out", 0.50, normaliser__kind="xbn", memory__ratio=0.01),
    trial("epochs_differ", 0.50, normaliser__kind="xbn", memory__ratio=0.2, epochs=10),
    trial("kind_out", 0.50, normaliser__kind="ema", memory__ratio=0.2),
    trial("lambda_not_default", 0.50, normaliser__kind="xbn", normaliser__lambda_mu=0.3, memory__ratio=0.2),
    trial("lambda_missing", 0.50, normaliser__kind="pcxbn", memory__ratio=0.2),
    trial("nan_reward", math.nan, normaliser__kind="xbn", memory__ratio=0.2),
]
EXPECTED_REJECTIONS = {
    "stopped": "status stopped_early", "failed": "status failed: no result (NonFiniteLossError)",
    "confirm": "stage confirm", "ratio_out": "outside the new space: memory.ratio = 0.01",
    "epochs_differ": "fixed value differs: epochs = 10 in the old trial, 6 in the new space",
    "kind_out": "outside the new space: normaliser.kind = 'ema'",
    "lambda_not_default": "absent in the new space: normaliser.lambda_mu = 0.3",
    "lambda_missing": "missing param: normaliser.lambda_mu", "nan_reward": "no finite final_recall_at_1",
}


def test_keeps_fitting_trials_and_rejects_the_rest_with_reasons(tmp_path):
    warm = warm_start_points(write_sweep(tmp_path, ROWS), load_space("quickstart"), "recall_at_1", "max")
    # best first; seed and device are ignored (they do not change what is learnt)
    assert warm.rewards == [0.72, 0.61]
    assert warm.points == [{"normaliser.kind": "xbn", "memory.ratio": 0.2},
                           {"normaliser.kind": "pcxbn", "normaliser.lambda_mu": 0.3, "memory.ratio": 0.5}]
    reasons = {reason.rsplit("(trial ", 1)[1].rstrip(")"): reason for _, reason in warm.rejected}
    assert set(reasons) == set(EXPECTED_REJECTIONS)
    for trial_id, fragment in EXPECTED_REJECTIONS.items():
        assert fragment in reasons[trial_id], reasons[trial_id]
    assert "2 trial(s) of " in warm.summary() and "kept, 9 rejected" in warm.summary()
    assert "\n  1 x status stopped_early" in warm.summary()


def test_min_mode_orders_best_first_and_a_narrower_space_keeps_fewer(tmp_path):
    path = write_sweep(tmp_path, ROWS)
    warm = warm_start_points(path, load_space("quickstart"), "recall_at_1", "min")
    assert warm.rewards == [0.61, 0.72]
    pinned = warm_start_points(path, load_space("quickstart", overrides={"normaliser.kind": "pcxbn"}),
                               "recall_at_1", "max")
    assert pinned.points == [{"normaliser.lambda_mu": 0.3, "memory.ratio": 0.5}]


def test_points_replay_through_define_by_run(tmp_path):
    space = load_space("quickstart")
    warm = warm_start_points(write_sweep(tmp_path, ROWS), space, "recall_at_1", "max")
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=0))
    for point, reward in zip(warm.points, warm.rewards):
        study.enqueue_trial(point)
        asked = study.ask()
        space.define_by_run(asked)
        assert asked.params == point
        study.tell(asked, reward)
    assert study.best_value == 0.72


def test_unusable_old_sweeps_raise(tmp_path):
    with pytest.raises(WarmStartError, match="trials.parquet is missing"):
        warm_start_points(str(tmp_path / "nowhere"), load_space("quickstart"), "recall_at_1", "max")
    path = write_sweep(tmp_path, ROWS)
    with pytest.raises(WarmStartError, match="no column 'final_map_at_r'.*'final_recall_at_1'"):
        warm_start_points(path, load_space("quickstart"), "map_at_r", "max")


@pytest.mark.slow
def test_warm_start_end_to_end_on_the_toy_trainable(ray_session, toy_space, tmp_path, capsys):
    import pandas as pd
    from tune.cli import main

    common = ["--search", "optuna", "--scheduler", "fifo", "--no-dashboard", "--no-stop-collapsed", "--storage", str(tmp_path),
              "--max-concurrent", "1"]
    assert main(["sweep", str(toy_space), "--num-samples", "2", "--name", "old", "--seed", "0", *common]) == 0
    capsys.readouterr()
    assert main(["sweep", str(toy_space), "--num-samples", "1", "--name", "new", "--seed", "1",
                 "--warm-start", str(tmp_path / "old"), *common]) == 0
    assert f"2 trial(s) of {tmp_path / 'old'} kept, 0 rejected" in capsys.readouterr().out
    old = pd.read_parquet(tmp_path / "old" / "results" / "trials.parquet")
    new = pd.read_parquet(tmp_path / "new" / "results" / "trials.parquet")
    assert len(new) == 1 and (new["status"] == "completed").all()  # old points are told, not re-run
    assert new["config.memory.ratio"].iloc[0] not in set(old["config.memory.ratio"])
