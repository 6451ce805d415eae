"""``xbm-tune export``: a trial's best weights (or a ``train`` run's) as a self-contained embedder folder.

    xbm-tune export SWEEP --best --out embedder/            # the stage's best trial (default stage: sweep)
    xbm-tune export SWEEP --trial 3f2a_00004 --stage confirm --out embedder/
    xbm-tune export --run runs/20261124-061500 --out embedder/

The folder (:mod:`xbm.evaluate.embedder`): ``weights.safetensors``, ``embedder.yaml`` (model, preprocessing,
provenance: sweep, stage, trial, epoch, metric, value, git sha), ``README.md``. A sweep's weights are the
trial's ``best_weights`` (trials.parquet; a path or URI); a run's are its ``best_weights.pt`` (the epoch
with the best ``recall_at_1``), else its ``checkpoint.pt`` (the last epoch). Exit 2 naming what is wrong:
a trial id not in the sweep, ``--best`` with no finished trial, a trial or run without weights, a data set
of vectors (nothing to embed as images), ``--stage`` with ``--run`` (a run has no stages).
"""
from __future__ import annotations

import argparse
import io
import math
import sys
from pathlib import Path
from typing import Any, Mapping

from analysis.contract import FINISHED_STATUSES, STAGES
from analysis.location import read_file_bytes

RUN_WEIGHTS = ("best_weights.pt", "checkpoint.pt")


EXPORT_EXAMPLES = """examples:
  xbm-tune export ~/xbm_sweeps/quickstart-20261121-081500 --best --out embedder/
  xbm-tune export ~/xbm_sweeps/quickstart-20261121-081500 --trial 3f2a_00004 --stage confirm --out embedder/
  xbm-tune export --run runs/20261124-061500 --out embedder/
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Export a sweep trial's best weights (or an `xbm-tune train` run's) as a self-contained\n"
                          "embedder folder: weights.safetensors, embedder.yaml (model, preprocessing,\n"
                          "provenance) and README.md.")
    parser.epilog = EXPORT_EXAMPLES
    parser.add_argument("sweep", metavar="SWEEP", nargs="?", help="the sweep folder (<storage>/<name>), or a URI")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--trial", metavar="ID", help="this trial's best weights")
    which.add_argument("--best", action="store_true", help="the best finished trial of --stage (the default)")
    which.add_argument("--run", metavar="RUN_DIR", help="an `xbm-tune train` output folder instead of a sweep")
    parser.add_argument("--stage", choices=STAGES, default=None,
                        help=f"the sweep's stage to take the trial from (default {STAGES[0]}; not with --run)")
    parser.add_argument("--out", metavar="DIR", required=True, help="the export folder (created)")


def run(args: argparse.Namespace) -> int:
    """``xbm-tune export``: a trial's (or a train run's) best weights as an embedder folder.

    Args:
        args: the parsed arguments of ``xbm-tune export`` (``add_arguments``).

    Returns:
        The exit status: 0 when the export folder was written, 2 on bad input (the message printed).

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    from xbm.evaluate.embedder import write_export

    try:
        if args.run and args.sweep:
            raise ValueError(f"give either SWEEP or --run, not both (got {args.sweep!r} and --run {args.run!r})")
        if not args.run and not args.sweep:
            raise ValueError("export needs a sweep folder (SWEEP) or --run RUN_DIR")
        if args.run and args.stage is not None:
            raise ValueError(f"--stage picks a sweep's trials; a --run folder has no stages (got --stage "
                             f"{args.stage} with --run {args.run!r}): drop --stage")
        export = (from_run(Path(args.run)) if args.run else
                  from_sweep(args.sweep, args.trial, args.stage or STAGES[0]))
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    folder = write_export(args.out, **export)
    prov = export["provenance"]
    print(f"exported {export['model']} ({prov.get('trial') or prov.get('run')}, epoch {prov.get('epoch')}, "
          f"{prov.get('metric')} {prov.get('value')}) to {folder}")
    return 0


def pick_trial(trials, trial: str | None, stage: str, metric: str, mode: str) -> Mapping[str, Any]:
    """The trials.parquet row of ``trial``, or the best finished trial of ``stage`` by ``best_<metric>``
    (``final_<metric>`` for ``refit``, whose weights are its last epoch's)."""
    if trial is not None:
        rows = trials[trials["trial_id"].astype(str) == trial] if "trial_id" in trials else trials.iloc[:0]
        if rows.empty:
            known = sorted(trials["trial_id"].astype(str))[:10] if "trial_id" in trials else []
            raise ValueError(f"--trial {trial!r} is not a trial of this sweep; its trials include {known}")
        return rows.iloc[0].to_dict()
    # a refit run keeps its last epoch's weights (nothing held out to select on): ranked by that epoch's value
    column = f"{'final' if stage == 'refit' else 'best'}_{metric}"
    stage_rows = trials[trials["stage"] == stage] if "stage" in trials else trials.iloc[:0]
    done = stage_rows[stage_rows["status"].isin(FINISHED_STATUSES)] if "status" in stage_rows else stage_rows.iloc[:0]
    if column in done:
        done = done[done[column].notna()]
    if done.empty:
        statuses = dict(stage_rows["status"].value_counts()) if "status" in stage_rows else {}
        raise ValueError(f"--best needs a finished ({' or '.join(FINISHED_STATUSES)}) trial with a {column} in stage "
                         f"{stage!r}, but there is none (trials by status: {statuses or 'no trial'})")
    order = done[column].astype(float).sort_values(ascending=(mode == "min"), kind="stable")
    return done.loc[order.index[0]].to_dict()


def from_sweep(sweep: str, trial: str | None, stage: str) -> dict[str, Any]:
    from tune.results.status import load_status

    record, trials = load_status(sweep, command="export")
    row = pick_trial(trials, trial, stage, record.metric, record.mode)
    uri = row.get("best_weights")
    if uri is None or (isinstance(uri, float) and math.isnan(uri)) or not str(uri):
        raise ValueError(f"trial {row['trial_id']} ({row.get('status')}) has no best weights (it reported no "
                         f"finite {record.metric}, or ran before best weights were kept)")
    payload = _load(read_file_bytes(str(uri), "the best weights file"), str(uri))
    provenance = {"source": "sweep", "sweep": sweep.rstrip("/"), "experiment": record.experiment,
                  "stage": str(row.get("stage")), "trial": str(row["trial_id"]), "epoch": int(payload["epoch"]),
                  "metric": str(payload.get("metric", record.metric)), "value": float(payload["value"]),
                  "git_sha": _text(row.get("git_sha")), "weights": str(uri)}
    return _export_args(payload, provenance, where=str(uri))


def from_run(folder: Path) -> dict[str, Any]:
    if not (folder / "config.yaml").is_file():
        raise FileNotFoundError(f"--run needs an `xbm-tune train` output folder (config.yaml and checkpoint.pt), "
                                f"but {folder} has no config.yaml")
    found = [name for name in RUN_WEIGHTS if (folder / name).is_file()]
    if not found:
        raise FileNotFoundError(f"the run folder {folder} has neither {' nor '.join(RUN_WEIGHTS)}: "
                                "no weights to export")
    path = folder / found[0]
    payload = _load(path.read_bytes(), str(path))
    from tune.results.record import provenance as code_provenance

    metric = payload.get("metric", "recall_at_1")
    value = payload.get("value")
    if value is None:  # checkpoint.pt: the last epoch, its metric from metrics.jsonl
        value = _last_metric(folder, metric)
    provenance = {"source": "run", "run": str(folder), "weights": found[0], "epoch": int(payload["epoch"]),
                  "metric": metric, "value": value, "git_sha": code_provenance()["git_sha"]}
    return _export_args(payload, provenance, where=str(path))


def _export_args(payload: Mapping[str, Any], provenance: dict, where: str) -> dict[str, Any]:
    """``write_export``'s keyword arguments from a weights payload ({"model", "config", "preprocessing"?})."""
    from xbm.config import TrainConfig
    from xbm.data.preprocess import Preprocessing

    config = dict(payload["config"])
    cfg = TrainConfig.from_dict(config)
    prep = payload.get("preprocessing")
    if prep is None:  # weights saved before the preprocessing was: rebuild it from the data set
        prep = _rebuild_preprocessing(cfg, where)
    prep = Preprocessing.from_dict(prep)
    return {"model_state": payload["model"], "model": cfg.model, "embedding_size": cfg.embedding_size,
            "input_shape": (prep.channels, prep.image_size, prep.image_size), "preprocessing": prep,
            "provenance": provenance, "config": config}


def _rebuild_preprocessing(cfg, where: str) -> dict:
    from xbm.data import build_dataset

    splits = build_dataset(cfg)
    if splits.preprocessing is None:
        raise ValueError(f"{where} holds a model of the vector data set {cfg.dataset!r}: an embedder takes "
                         "images; export a run on an image data set")
    return splits.preprocessing.to_dict()


def _load(data: bytes, where: str) -> dict:
    import torch

    try:
        payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a truncated or foreign file, named
        raise ValueError(f"{where} is not a readable weights file ({type(exc).__name__}: {exc})") from None
    if not isinstance(payload, dict) or "model" not in payload or "config" not in payload:
        raise ValueError(f"{where} must hold a dict with 'model' and 'config' (best_weights.pt or checkpoint.pt)")
    if "preprocessing" in payload and payload["preprocessing"] is None:
        raise ValueError(f"{where} holds a model of the vector data set {payload['config'].get('dataset')!r}: "
                         "an embedder takes images; export a run on an image data set")
    return payload


def _last_metric(folder: Path, metric: str):
    import json

    lines = (folder / "metrics.jsonl").read_text().splitlines() if (folder / "metrics.jsonl").is_file() else []
    value = json.loads(lines[-1]).get(metric) if lines else None
    return None if value is None else float(value)


def _text(value) -> str | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
