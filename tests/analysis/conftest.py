"""Parquet fixtures in the exact contract layout (docs/ARCHITECTURE.md): a finished sweep with four
kinds x two memory ratios x three seeds plus ASHA-stopped trials, a running one (torn file, trial
not yet in the table), one without trials.parquet, one with a failed trial, one with a confirm stage.

``VALUES[(kind, ratio)]`` are each configuration's best Recall@1 at seeds 0, 1, 2: tests compare
the analysis against hand computations on these numbers. The sweeps are built once per session and
only read (a report test adds report.md and figures/ beside results/, which nothing else reads).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.contract import column_type

MAX_EPOCHS = 4
SEEDS = (0, 1, 2)
KINDS = ("none", "xbn", "pcxbn", "axbn")
VALUES = {
    ("none", 0.1): (0.50, 0.52, 0.51), ("none", 0.5): (0.55, 0.58, 0.56),
    ("xbn", 0.1): (0.57, 0.59, 0.58), ("xbn", 0.5): (0.60, 0.64, 0.65),
    ("pcxbn", 0.1): (0.62, 0.61, 0.66), ("pcxbn", 0.5): (0.66, 0.69, 0.70),
    ("axbn", 0.1): (0.59, 0.60, 0.62), ("axbn", 0.5): (0.58, 0.61, 0.60),
}
# conditional parameters per (kind, ratio): absent (null) for the other kinds
CONDITIONAL = {
    ("pcxbn", 0.1): {"normaliser.lambda_mu": 0.4, "normaliser.lambda_sigma": 0.6},
    ("pcxbn", 0.5): {"normaliser.lambda_mu": 0.6, "normaliser.lambda_sigma": 1.0},
    ("axbn", 0.1): {"normaliser.kalman_r": 0.01},
    ("axbn", 0.5): {"normaliser.kalman_r": 1.0},
}
# (kind, stop epoch, best value, conditional values): ASHA stopped them at a rung
STOPPED = (("none", 1, 0.30, {}), ("xbn", 2, 0.40, {}),
           ("pcxbn", 1, 0.35, {"normaliser.lambda_mu": 0.0, "normaliser.lambda_sigma": 0.2}),
           ("axbn", 2, 0.38, {"normaliser.kalman_r": 10.0}))
CONFIG_TYPES = {  # a representative slice of TrainConfig's dotted names and their types
    "dataset": str, "model": str, "epochs": int, "batch_size": int, "lr": float, "seed": int,
    "val_fraction": float, "evaluate_test": bool, "memory.ratio": float, "memory.start_epoch": int,
    "normaliser.kind": str, "normaliser.centre_only": bool, "normaliser.unit_norm": bool,
    "normaliser.delay_epochs": int, "normaliser.lambda_mu": float, "normaliser.lambda_sigma": float,
    "normaliser.kalman_r": float, "miner.pos_margin": float,
}
BASE = {"dataset": "toy", "model": "mlp", "epochs": MAX_EPOCHS, "batch_size": 32, "lr": 1e-3,
        "val_fraction": 0.2, "evaluate_test": False, "memory.start_epoch": 0, "normaliser.centre_only": False,
        "normaliser.unit_norm": False, "normaliser.delay_epochs": 0, "miner.pos_margin": 0.2}
SPACE = {"normaliser.kind": "{choice: [none, xbn, pcxbn, axbn]}", "memory.ratio": "{loguniform: [0.05, 1.0]}",
         "normaliser.lambda_mu": "{grid: [0.0, 0.4, 0.6], when: {normaliser.kind: pcxbn}}",
         "normaliser.lambda_sigma": "{uniform: [0.0, 1.0], when: {normaliser.kind: pcxbn}}",
         "normaliser.kalman_r": "{loguniform: [1.0e-4, 10.0], when: {normaliser.kind: axbn}}"}
SPACE_TEXT = "description: fixture\nbase:\n  dataset: toy\nparams:\n" + "".join(
    f"  {k}: {v}\n" for k, v in SPACE.items())
ARROW = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}


def config(kind: str, ratio: float, seed: int, extra: dict | None = None, **over) -> dict:
    values = {**BASE, "normaliser.kind": kind, "memory.ratio": ratio, "seed": seed, **(extra or {}), **over}
    return {f"config.{k}": values.get(k) for k in CONFIG_TYPES}


def epoch_rows(trial_id: str, cfg: dict, best: float, epochs: int, stage: str = "sweep",
               experiment: str = "fixture", test: bool = False) -> list[dict]:
    """Recall@1 climbs linearly to ``best`` at epoch ``MAX_EPOCHS`` (a stopped trial stops below it)."""
    rows = []
    for epoch in range(1, epochs + 1):
        r1 = best * (1.0 - 0.1 * (MAX_EPOCHS - epoch)) if epochs == MAX_EPOCHS else best * epoch / epochs
        row = {"experiment": experiment, "stage": stage, "trial_id": trial_id, "epoch": epoch,
               "loss": 2.0 / epoch, "lr": 1e-3, "epoch_time_s": 0.5, "images_per_s": 400.0,
               "recall_at_1": r1, "recall_at_10": min(1.0, r1 + 0.2), "map_at_r": r1 / 2, "r_precision": r1 / 1.5,
               "eval_split": "val", "drift_mean": np.nan if epoch == 1 else 0.4 / epoch,
               "drift_max": np.nan if epoch == 1 else 0.8 / epoch, "staleness_mean": 0.1 * epoch,
               "memory_fill": min(1.0, 0.5 * epoch), **cfg}
        if test:
            row.update(test_recall_at_1=r1 - 0.05, test_map_at_r=r1 / 2 - 0.02)
        rows.append(row)
    return rows


def trial_row(trial_id: str, cfg: dict, rows: list[dict], status: str, stage: str = "sweep",
              stop_reason=None, error=None, experiment: str = "fixture") -> dict:
    r1 = [r["recall_at_1"] for r in rows]
    best_at = int(np.argmax(r1)) if r1 else None
    return {"experiment": experiment, "stage": stage, "trial_id": trial_id, "status": status,
            "stop_reason": stop_reason, "error": error, "epochs_completed": len(rows),
            "best_recall_at_1": r1[best_at] if r1 else None, "best_epoch": best_at + 1 if r1 else None,
            "final_recall_at_1": r1[-1] if r1 else None,
            "best_map_at_r": max(r["map_at_r"] for r in rows) if rows else None,
            "final_map_at_r": rows[-1]["map_at_r"] if rows else None,
            "wall_time_s": 2.0 * len(rows), "gpu_hours": 0.0, "seed": cfg["config.seed"], "node_id": "node-a",
            "git_sha": "abc1234", "package_version": "0.1.0", **cfg}


def table(rows: list[dict]) -> pa.Table:
    """Stable Arrow types as the sink must write them: config columns typed from TrainConfig, nulls kept."""
    frame = pd.DataFrame(rows)
    fields = []
    for column in frame.columns:
        if column.startswith("config."):
            kind = ARROW[CONFIG_TYPES[column[len("config."):]]]
        else:
            kind = column_type(column)  # by name, as the sink types them (analysis.contract)
        fields.append(pa.field(column, kind))
    schema = pa.schema(fields)
    arrays = [pa.array([None if v is None or (not isinstance(v, str) and pd.isna(v)) else v
                        for v in frame[f.name].tolist()], type=f.type) for f in fields]
    return pa.Table.from_arrays(arrays, schema=schema)


def write_sweep(folder: Path, trials: list[dict], epochs: list[dict], options: dict | None = None,
                write_trials: bool = True) -> Path:
    results = folder / "results"
    (results / "epochs").mkdir(parents=True, exist_ok=True)
    for trial_id in dict.fromkeys(r["trial_id"] for r in epochs):
        rows = [r for r in epochs if r["trial_id"] == trial_id]
        pq.write_table(table(rows), results / "epochs" / f"{trial_id}.parquet")
    if write_trials:
        pq.write_table(table(trials), results / "trials.parquet")
    options = dict(options or {})
    cli = {"num_samples": 28, "search": "optuna", "scheduler": "asha", "max_epochs": MAX_EPOCHS, "grace_period": 1,
           "reduction_factor": 2.0, "metric": options.get("metric", "recall_at_1"), "mode": "max", "seed": 0,
           **options.pop("options", {})}
    record = {"experiment": folder.name, "stage": "sweep", "metric": "recall_at_1", "mode": "max",
              "max_epochs": MAX_EPOCHS, "options": cli,
              "space": {"name": "fixture", "description": "test fixture", "text": SPACE_TEXT, "params": list(SPACE)},
              **options}
    (results / "sweep.json").write_text(json.dumps(record))
    return folder


def finished_rows(experiment: str = "fixture") -> tuple[list[dict], list[dict]]:
    trials, epochs = [], []
    for (kind, ratio), values in VALUES.items():
        for seed, best in zip(SEEDS, values):
            trial_id = f"{kind}_{ratio}_{seed}"
            cfg = config(kind, ratio, seed, CONDITIONAL.get((kind, ratio)))
            rows = epoch_rows(trial_id, cfg, best, MAX_EPOCHS, experiment=experiment)
            epochs += rows
            trials.append(trial_row(trial_id, cfg, rows, "completed", experiment=experiment))
    for kind, stop, best, extra in STOPPED:
        trial_id = f"{kind}_stopped"
        cfg = config(kind, 0.3, 3, extra)
        rows = epoch_rows(trial_id, cfg, best, stop, experiment=experiment)
        epochs += rows
        trials.append(trial_row(trial_id, cfg, rows, "stopped_early", experiment=experiment,
                                stop_reason=f"asha: below the rung-{stop} cutoff"))
    return trials, epochs


@pytest.fixture(scope="session")
def finished_sweep(tmp_path_factory) -> Path:
    tmp_path = tmp_path_factory.mktemp("finished_sweep")
    trials, epochs = finished_rows()
    return write_sweep(tmp_path / "finished", trials, epochs)


@pytest.fixture(scope="session")
def running_sweep(tmp_path_factory) -> Path:
    tmp_path = tmp_path_factory.mktemp("running_sweep")
    """Three trials in the table (t1 running, t4 just started: no epoch yet), a fourth (t2) known only
    from its epochs, one torn epoch file (t3)."""
    trials, epochs = [], []
    for trial_id, kind, status, n in (("t0", "none", "completed", 4), ("t1", "xbn", "running", 2)):
        cfg = config(kind, 0.5, 0)
        rows = epoch_rows(trial_id, cfg, 0.6, n)
        epochs += rows
        trials.append(trial_row(trial_id, cfg, rows, status))
    trials.append(trial_row("t4", config("axbn", 0.5, 0, {"normaliser.kalman_r": 0.1}), [], "running"))
    epochs += epoch_rows("t2", config("pcxbn", 0.5, 0, CONDITIONAL[("pcxbn", 0.5)]), 0.5, 3)
    folder = write_sweep(tmp_path / "running", trials, epochs)
    (folder / "results" / "epochs" / "t3.parquet").write_bytes(b"PAR1 torn mid-write")
    return folder


@pytest.fixture(scope="session")
def crashed_sweep(tmp_path_factory) -> Path:
    tmp_path = tmp_path_factory.mktemp("crashed_sweep")
    """The driver died before the first trials.parquet: epoch files only."""
    epochs = epoch_rows("a", config("none", 0.5, 0), 0.5, 3) + epoch_rows("b", config("xbn", 0.5, 1), 0.7, 2)
    return write_sweep(tmp_path / "crashed", [], epochs, write_trials=False)


@pytest.fixture(scope="session")
def failed_sweep(tmp_path_factory) -> Path:
    tmp_path = tmp_path_factory.mktemp("failed_sweep")
    trials, epochs = [], []
    for trial_id, kind, seed in (("ok0", "none", 0), ("ok1", "xbn", 0)):
        cfg = config(kind, 0.5, seed)
        rows = epoch_rows(trial_id, cfg, 0.6 if kind == "xbn" else 0.5, MAX_EPOCHS)
        epochs += rows
        trials.append(trial_row(trial_id, cfg, rows, "completed"))
    cfg = config("axbn", 0.5, 0, {"normaliser.kalman_r": 100.0})
    rows = epoch_rows("bad", cfg, 0.2, 1)
    epochs += rows
    trials.append(trial_row("bad", cfg, rows, "failed", stop_reason="non-finite loss",
                            error="NonFiniteLossError: loss nan at epoch 2, iteration 7"))
    return write_sweep(tmp_path / "failed", trials, epochs)


CONFIRM_SEEDS = (10, 11, 12)
CONFIRMED = {("pcxbn", 0.5): (0.64, 0.66, 0.61), ("xbn", 0.5): (0.62, 0.63, 0.57)}  # best val R@1 per seed


@pytest.fixture(scope="session")
def confirm_sweep(tmp_path_factory) -> Path:
    tmp_path = tmp_path_factory.mktemp("confirm_sweep")
    """The finished sweep plus a confirm stage: its two best configurations x 3 new seeds, test metrics
    on the held-out classes (test R@1 at the last epoch = best - 0.05)."""
    trials, epochs = finished_rows()
    for (kind, ratio), values in CONFIRMED.items():
        for seed, best in zip(CONFIRM_SEEDS, values):
            trial_id = f"confirm_{kind}_{seed}"
            cfg = config(kind, ratio, seed, CONDITIONAL.get((kind, ratio)), evaluate_test=True)
            rows = epoch_rows(trial_id, cfg, best, MAX_EPOCHS, stage="confirm", test=True)
            epochs += rows
            trials.append(trial_row(trial_id, cfg, rows, "completed", stage="confirm"))
    return write_sweep(tmp_path / "confirm", trials, epochs)


@pytest.fixture
def build_sweep():
    """The builders, for tests that need their own variation."""
    return {"write_sweep": write_sweep, "finished_rows": finished_rows, "config": config,
            "epoch_rows": epoch_rows, "trial_row": trial_row}
