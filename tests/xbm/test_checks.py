"""xbm/checks.py: the one input check and the one ``--set`` parser that the config, the normaliser config,
``xbm-tune train`` and the sweep (tests/tune/test_options.py) all use."""
from __future__ import annotations

import pytest

from xbm import checks
from xbm import config as train_config
from xbm import train_cli
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


def test_train_strips_set_values_as_the_sweep_does():
    """Bug caught: ``xbm-tune train --set "dataset= toy"`` keeping the blank (" toy" is no data set) while
    ``xbm-tune sweep`` strips it: one parser, values and keys stripped in both."""
    assert train_cli.parse_overrides([" dataset = toy ", "lr=3e-4", "data_root="]) == {
        "dataset": "toy", "lr": "3e-4", "data_root": ""}
    for bad in ("epochs", "=3", " =3"):
        with pytest.raises(train_cli.BadInput, match=f"--set must satisfy the form key=value.*but got '{bad}'"):
            train_cli.parse_overrides([bad])
