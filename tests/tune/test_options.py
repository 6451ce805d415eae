"""tune/options.py's checks come from xbm/checks.py: the sweep's own exception, the shared rule and parser."""
from __future__ import annotations

import pytest

from tune import options
from tune.options import SweepInputError, SweepOptions, parse_overrides
from xbm import checks


def test_sweep_options_use_the_shared_check_and_parser_with_their_exception():
    """Bug caught: a third copy of the check or the parser in tune (drifting from xbm's), or the shared one
    raising a plain ValueError where the CLI needs SweepInputError for its exit 2."""
    assert options._check.__code__ is checks.checker().__code__
    with pytest.raises(SweepInputError, match=r"^--grace-period must satisfy >= 1, but got 0$"):
        SweepOptions(grace_period=0)
    assert parse_overrides([" lr = 3e-4 ", "normaliser.kind=xbn"]) == {"lr": "3e-4", "normaliser.kind": "xbn"}
    with pytest.raises(SweepInputError, match="--set must satisfy the form key=value"):
        parse_overrides(["lr"])
