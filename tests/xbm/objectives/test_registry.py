"""``build_objective``: the registry's names, and the refusal of any other."""
import re
from types import SimpleNamespace

import pytest
import torch

from xbm.objectives import build_objective


def test_an_unknown_objective_is_refused_naming_the_known_ones():
    """Bug caught (mutation testing): the message lost (``None``) or a crash building it, for a config that
    bypassed validation (the config layer checks the same names first)."""
    message = "objective must be one of ['supervised', 'instance', 'moco', 'neighbours'], but got 'simclr'"
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        build_objective(SimpleNamespace(objective="simclr"), torch.nn.Identity(), torch.arange(4))
