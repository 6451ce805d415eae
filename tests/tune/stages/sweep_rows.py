"""A sweep's trials.parquet and sweep.json written by hand: the rows the stages' tests (and the commands') read."""
from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq

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
