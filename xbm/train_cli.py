"""``xbm-tune train``: one training run from the command line (also ``python -m xbm.train_cli``).

    xbm-tune train --set dataset=toy --set model=mlp --set epochs=5
    xbm-tune train --config run.yaml --set lr=3e-4 --output runs/lr3e-4

Options come from ``--config FILE.yaml`` (dotted keys such as ``memory.ratio: 0.2``, or nested mappings),
overridden by each ``--set key=value``. Relative paths (``data_root``, ``pretrained_path``) are relative to
the config file's folder in the file, to the working directory in ``--set``; config.yaml records them
absolute. The output folder receives ``config.yaml`` (the resolved config),
``metrics.jsonl`` and ``metrics.csv`` (one row per epoch), ``checkpoint.pt`` (``Trainer.state_dict()``
after the last good epoch, replaced atomically) and ``best_weights.pt`` (the model at the epoch with the best
``recall_at_1``; ``xbm-tune export --run`` reads it). Exit status: 0 done, 2 bad input (unknown key, bad value,
missing data set, an image that cannot be decoded under on_bad_image=stop, a corrupt pretrained_path,
occupied output folder), 1 failure (e.g. a non-finite loss, missing pretrained weights).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from xbm import checks

TRAIN_EXAMPLES = """examples:
  xbm-tune train --set dataset=toy --set model=mlp --set epochs=5 --set embedding_size=64
  xbm-tune train --set dataset=omniglot --set data_root=../shared/datasets/omniglot_small \\
      --set model=resnet18 --set image_size=64 --set normaliser.kind=xbn
  xbm-tune train --config run.yaml --set memory.enabled=false --output runs/no_memory
"""
BEST_METRIC = "recall_at_1"  # on the selection split, as a sweep's default
SHOWN = ("loss", "recall_at_*", "map_at_r", "drift_mean", "memory_fill", "images_per_s",
         "epoch_time_s")


class BadInput(ValueError):
    """A problem with what the user gave (exit 2)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The train command's flags (``tune/cli.py`` adds them to its ``train`` sub-parser)."""
    config = parser.add_argument_group("configuration (TrainConfig dotted names; see xbm/config.py)")
    config.add_argument("--config", metavar="FILE.yaml", help="YAML file of dotted keys (--set overrides it)")
    config.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                        help="one config value, repeatable, e.g. --set normaliser.kind=xbn --set lr=3e-4")
    output = parser.add_argument_group("output")
    output.add_argument("--output", metavar="DIR", help="output folder (default: runs/<UTC timestamp>)")
    output.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bars (each epoch's, and an evaluation's once it lasts a few seconds; "
                             "never drawn when stderr is not a terminal); the metrics lines stay")


def load_yaml(path: Optional[str]) -> dict[str, Any]:
    if not path:
        return {}
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise BadInput(f"--config must name a readable YAML file, but got {path!r} ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise BadInput(f"--config {path!r} must be valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BadInput(f"--config {path!r} must hold a mapping of config keys, but holds a {type(data).__name__}")
    return data


def resolve_config(args: argparse.Namespace):
    from xbm.config import TrainConfig
    from xbm.data.inputs import absolute_paths

    in_file = absolute_paths(load_yaml(args.config), Path(args.config).parent) if args.config else {}
    overrides = checks.parse_overrides(args.overrides, BadInput)
    return TrainConfig.from_dict({**in_file, **absolute_paths(overrides, Path.cwd())})


def output_folder(path: Optional[str]) -> Path:
    """The folder to write (created later, once the run could be built): never one holding a run."""
    folder = Path(path) if path else Path("runs") / time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    if (folder / "metrics.jsonl").exists() or (folder / "checkpoint.pt").exists():
        raise BadInput(f"--output must not hold a previous run, but {folder} has metrics.jsonl or "
                       "checkpoint.pt; choose another folder")
    return folder


class RunWriter:
    """Writes config.yaml, appends metrics.jsonl / metrics.csv rows, replaces checkpoint.pt atomically and keeps
    ``best_weights.pt``, the model at the epoch with the best ``recall_at_1`` (:meth:`offer_best`, in a sweep
    trial's format, so that ``xbm-tune export --run`` exports the best epoch, not the last). Both files are written
    in the background while the next epoch trains (:class:`xbm.training.checkpoint.CheckpointWriter`,
    :class:`xbm.training.best_weights.BestWeights`): call :meth:`wait` before the run ends."""

    def __init__(self, folder: Path, config: dict[str, Any]) -> None:
        import yaml

        from xbm.training.best_weights import BestWeights
        from xbm.training.checkpoint import CheckpointWriter

        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.columns: list[str] = []
        self.rows: list[dict[str, Any]] = []
        self.files = CheckpointWriter()
        self.best = BestWeights.in_folder(folder)

    def metrics(self, row: dict[str, Any]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        with open(self.folder / "metrics.jsonl", "a") as handle:
            handle.write(json.dumps(clean) + "\n")
        self.rows.append(row)
        new = [k for k in row if k not in self.columns]
        if new:  # a metric first seen now (eval_every skipped the first epochs' evaluation): rewrite with it
            self.columns += new
            with open(self.folder / "metrics.csv", "w", newline="") as handle:
                writer = csv.DictWriter(handle, self.columns)
                writer.writeheader()
                writer.writerows(self.rows)
            return
        with open(self.folder / "metrics.csv", "a", newline="") as handle:
            csv.DictWriter(handle, self.columns).writerow(row)

    def checkpoint(self, state: dict[str, Any], name: str = "checkpoint.pt") -> None:
        self.files.save(state, self.folder / name)

    def offer_best(self, trainer, metrics: dict[str, Any]) -> bool:
        """Keep the trainer's model as ``best_weights.pt`` if this epoch's ``recall_at_1`` beats every earlier one
        (higher is better; a tie keeps the earlier epoch). Returns whether it was kept."""
        model = getattr(trainer.model, "module", trainer.model)  # the weights without a DDP wrapper's prefix
        return self.best.offer(int(metrics["epoch"]), metrics.get(BEST_METRIC), model,
                               {"config": trainer.cfg.to_dict(), "preprocessing": trainer.preprocessing_dict(),
                                "metric": BEST_METRIC})

    def wait(self) -> None:
        """Until checkpoint.pt and best_weights.pt hold the last states given; a failed write raises OSError."""
        try:
            self.files.wait()
        finally:
            self.best.wait()


def format_line(metrics: dict[str, Any], epochs: int) -> str:
    parts = [f"epoch {metrics['epoch']}/{epochs}"]
    # "recall_at_*": every K of the run's set (the data set's or eval_ks), in the order reported
    recalls = [name for name in metrics if name.startswith("recall_at_")]
    names = [name for shown in SHOWN for name in (recalls if shown == "recall_at_*" else [shown])]
    for name in names:
        value = metrics.get(name)
        if isinstance(value, float):
            parts.append(f"{name} {value:.4g}" if name != "images_per_s" else f"{name} {value:.0f}")
    return "  ".join(parts)


def progress_bars(enabled: bool) -> dict[str, Any]:
    """The Trainer's ``progress`` (each epoch's bar) and ``eval_progress`` (an evaluation's, once it lasts
    ``DELAY_S``): ``xbm.runtime.progress.bars``, drawn only on a terminal; none under ``--no-progress``."""
    from xbm.runtime.progress import DELAY_S, bars

    if not enabled:
        return {"progress": None, "eval_progress": None}
    return {"progress": bars(), "eval_progress": bars(delay_s=DELAY_S)}


def run(args: argparse.Namespace) -> int:
    """Train as the arguments say; return the exit status (0 done, 2 bad input, 1 failure)."""
    from xbm.errors import BadImageError, DatasetNotFoundError, NonFiniteLossError, PretrainedWeightsError
    from xbm.evaluate.signals import collapse_warning

    try:
        cfg = resolve_config(args)
        folder = output_folder(args.output)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from tqdm import tqdm

    from xbm.trainer import Trainer

    try:
        trainer = Trainer(cfg, **progress_bars(getattr(args, "progress", True)))
    except (ValueError, DatasetNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except PretrainedWeightsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    writer = RunWriter(folder, cfg.to_dict())
    print(f"output: {folder}")
    try:
        for metrics in trainer.fit():
            writer.metrics(metrics)
            writer.checkpoint(trainer.state_dict())
            writer.offer_best(trainer, metrics)
            tqdm.write(format_line(metrics, cfg.epochs))
            warning = collapse_warning(metrics)
            if warning:
                tqdm.write(warning, file=sys.stderr)
    except NonFiniteLossError as exc:
        print(f"error: {exc} (checkpoint.pt holds the last good epoch)", file=sys.stderr)
        return 1
    except BadImageError as exc:  # decoded live (on_bad_image=stop), maybe in a loader worker
        # a worker's error arrives as its traceback's text: its last line is the message naming the file
        print(f"error: {str(exc).strip().splitlines()[-1].split('BadImageError: ', 1)[-1]}", file=sys.stderr)
        return 2
    finally:
        trainer.close()   # its loader workers end now (a caller in a long-lived process: no 5-s timeouts)
        writer.wait()     # the last good epoch's files land before the command returns
    print(f"done: {folder / 'metrics.jsonl'}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="xbm-tune train", description="Train one XBM run (no Ray).",
                                     epilog=TRAIN_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
