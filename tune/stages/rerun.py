"""What every stage that re-runs a sweep's configurations shares: its options (the sweep's, with the stage's
resources), its seeds and ``--set`` values, and the checks of its configs before Ray starts."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Mapping, Sequence

from analysis.contract import SweepRecord
from tune.driver.options import SweepOptions
from tune.errors import SweepInputError
from tune.results.trial_config import train_config
from xbm.checks import parse_overrides
from xbm.data.inputs import absolute_paths


def rerun_options(record: SweepRecord, args: argparse.Namespace) -> SweepOptions:
    """The sweep's recorded options with the stage's resources (``tune.commands._arguments.add_rerun_arguments``'
    flags in ``args``) and no warm start."""
    changes = {k: getattr(args, k) for k in ("cpus_per_trial", "gpus_per_trial", "address")
               if getattr(args, k) is not None}
    return SweepOptions.from_record(record.options).replace(
        metric=record.metric, mode=record.mode, max_concurrent=args.max_concurrent, dashboard=args.dashboard,
        warm_start=None, **changes)


def rerun_seeds(record: SweepRecord, seeds: int, seed_start: int | None) -> list[int]:
    """``seeds`` consecutive seeds from ``seed_start``, else from the sweep's seed + 1 (never the seed the
    configuration was selected on; the same seeds for every configuration)."""
    start = seed_start if seed_start is not None else int(record.option("seed", 0)) + 1
    return list(range(start, start + seeds))


def rerun_overrides(pairs: Sequence[str] | None) -> dict[str, Any]:
    """The stage's ``--set`` values, their paths made absolute here (relative to the working directory)."""
    return absolute_paths(parse_overrides(pairs, SweepInputError), Path.cwd())


def check_configs(configs: Sequence[Mapping[str, Any]]) -> None:
    """Every config a valid TrainConfig (a bad ``--set`` fails here) and its data readable on this machine."""
    from tune.driver.checks import check_data

    for config in configs:
        train_config(config)
    check_data(configs)
