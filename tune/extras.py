"""Optional packages (pyproject's extras): each is checked when a sweep asks for it, before Ray starts, so a
missing one exits 2 with the command that installs it instead of failing inside Ray's callbacks."""
from __future__ import annotations

import importlib

from tune.options import SweepInputError


def require(module: str, feature: str, install: str) -> None:
    """Import ``module`` or raise SweepInputError: ``feature`` (e.g. ``--log wandb``) needs it, ``install``
    says how to get it (e.g. ``pip install '.[wandb]'``)."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise SweepInputError(f"{feature} needs the package {module!r}, which cannot be imported ({exc}): "
                              f"install it with `{install}`") from None
