"""xbm/checks.py: the one input check and the one ``--set`` parser that the config, the normaliser config,
``xbm-tune train`` and the sweep all use."""
from __future__ import annotations

import pytest

from xbm import checks, config as train_config, train_cli
from xbm.normalisers import config as normaliser_config


def test_every_config_check_is_the_shared_one_with_its_prefix():
    """Bug caught: a copy of the check drifting (a message without the rule or the value, a normaliser
    field named without its ``normaliser.`` prefix, a plain ValueError where the caller needs its own)."""
    shared = checks.checker().__code__
    assert train_config._check.__code__ is shared and normaliser_config._check.__code__ is shared
    with pytest.raises(ValueError, match=r"^normaliser\.lambda_mu must satisfy 0 <= lambda_mu <= 1, but got 2\.0$"):
        normaliser_config.NormaliserConfig(lambda_mu=2.0)
    with pytest.raises(ValueError, match=r"^lr must satisfy > 0, but got -1\.0$"):
        train_config.TrainConfig(lr=-1.0)

    class Refused(ValueError):
        pass

    with pytest.raises(Refused, match=r"^x\.k must satisfy >= 1, but got 0$"):
        checks.checker("x.", Refused)(False, "k", ">= 1", 0)
    checks.checker()(True, "k", ">= 1", 0)  # a rule that holds raises nothing


class SweepRefused(ValueError):
    """As tune.errors.SweepInputError: a caller's own exception (its exit 2)."""


@pytest.mark.parametrize("error", [train_cli.BadInput, SweepRefused])
def test_one_set_parser_strips_pairs_and_raises_the_callers_error(error):
    """Bug caught: ``xbm-tune train --set "dataset= toy"`` keeping the blank (" toy" is no data set) while
    ``xbm-tune sweep`` strips it, or the parser raising a plain ValueError where the train command needs its
    BadInput and the sweep its SweepInputError (exit 2): one parser, the caller's exception."""
    assert checks.parse_overrides([" dataset = toy ", "lr=3e-4", "data_root="], error) == {
        "dataset": "toy", "lr": "3e-4", "data_root": ""}
    for bad in ("epochs", "=3", " =3"):
        with pytest.raises(error, match=f"--set must satisfy the form key=value.*but got '{bad}'"):
            checks.parse_overrides([bad], error)


def test_train_resolves_set_pairs_with_the_shared_parser():
    """Bug caught: ``xbm-tune train`` parsing ``--set`` with a copy of its own (drifting from the sweep's)."""
    import argparse

    cfg = train_cli.resolve_config(argparse.Namespace(config=None, overrides=[" dataset = toy ", "lr = 3e-4"]))
    assert (cfg.dataset, cfg.lr) == ("toy", 3e-4)
    with pytest.raises(train_cli.BadInput, match="--set must satisfy the form key=value"):
        train_cli.resolve_config(argparse.Namespace(config=None, overrides=["lr"]))
