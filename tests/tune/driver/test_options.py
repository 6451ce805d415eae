"""tune/driver/options.py's checks come from xbm/checks.py: the sweep's own exception, the shared rule and parser."""
from __future__ import annotations

import pytest

from tune.driver import options
from tune.driver.options import SweepOptions
from tune.errors import SweepInputError
from xbm import checks


def test_sweep_options_use_the_shared_check_and_parser_with_their_exception():
    """Bug caught: a second copy of the check in tune (drifting from xbm's), or the shared one raising a plain
    ValueError where the CLI needs SweepInputError for its exit 2."""
    assert options._check.__code__ is checks.checker().__code__
    with pytest.raises(SweepInputError, match=r"^--grace-period must satisfy >= 1, but got 0$"):
        SweepOptions(grace_period=0)


def test_repeated_metric_with_modes_gives_the_first_as_metric_and_the_rest_as_extras():
    """Bug caught: a second --metric replacing the first (argparse's default for a repeated flag), a
    metric without :MODE ignoring --mode, or mismatched extras accepted."""
    from tune.driver.options import metric_options

    got = metric_options(["recall_at_1:max", "gpu_hours:min", "memory_bytes"], "min")
    options = SweepOptions(**got)
    assert (options.metric, options.mode) == ("recall_at_1", "max")
    assert options.metrics == ("recall_at_1", "gpu_hours", "memory_bytes") and options.modes == ("max", "min", "min")
    assert metric_options(None, "max") == {"metric": "recall_at_1", "mode": "max", "extra_metrics": (),
                                           "extra_modes": ()}
    with pytest.raises(SweepInputError, match="--metric must satisfy NAME:MODE with MODE one of"):
        SweepOptions(**metric_options(["recall_at_1", "gpu_hours:least"], "max"))
    with pytest.raises(SweepInputError, match="--metric must satisfy each metric once"):
        SweepOptions(**metric_options(["recall_at_1", "recall_at_1:min"], "max"))
    # sweep.json stores the extras as lists: they come back as tuples
    assert SweepOptions.from_record(options.to_dict()).extra_metrics == ("gpu_hours", "memory_bytes")


def test_the_chosen_loggers_are_recorded_and_old_records_have_none(tmp_path):
    """Bugs caught: --log lost between the CLI and sweep.json (``record.options``), a record's JSON list not
    turned back into the options' tuple, or a record written before --log existed failing to load."""
    import json

    from analysis.sweep_record import SweepRecord
    from tune.cli import build_parser
    from tune.commands._arguments import options_from

    args = build_parser().parse_args(["sweep", "toy.yaml", "--log", "wandb", "--log", "mlflow"])
    chosen = options_from(args)
    assert chosen.loggers == ("wandb", "mlflow")
    record = SweepRecord.from_json(json.dumps(SweepRecord(options=chosen.to_dict()).to_dict()))
    assert record.option("loggers") == ["wandb", "mlflow"]
    assert SweepOptions.from_record(record.options).loggers == ("wandb", "mlflow")
    old = {k: v for k, v in chosen.to_dict().items() if k != "loggers"}
    assert SweepOptions.from_record(old).loggers == ()
    with pytest.raises(SweepInputError, match="--log must satisfy each logger once"):
        SweepOptions(loggers=("wandb", "wandb"))
