"""The sweep's input errors, in one place: bad options, names, paths or a missing optional package.

``SweepInputError`` is what every layer of ``tune`` raises for bad input; the CLI prints it and exits 2 with
nothing started. ``bad_input`` turns the input checks' own ValueErrors into it, ``require`` a missing extra.
"""
from __future__ import annotations

import importlib
from contextlib import contextmanager
from typing import Iterator


class SweepInputError(ValueError):
    """Bad input to a sweep (options, names, paths): the CLI prints it and exits 2, nothing started."""


@contextmanager
def bad_input() -> Iterator[None]:
    """Turn the input checks' ValueErrors (SpaceError, TrainConfig's, a missing file) into exit 2."""
    try:
        yield
    except (ValueError, FileNotFoundError) as exc:
        if isinstance(exc, SweepInputError):
            raise
        raise SweepInputError(str(exc)) from exc


def require(module: str, feature: str, install: str) -> None:
    """Import ``module`` or raise SweepInputError: ``feature`` (e.g. ``--log wandb``) needs it, ``install``
    says how to get it (e.g. ``pip install '.[wandb]'``). Optional packages (pyproject's extras) are checked
    when a sweep asks for them, before Ray starts, so a missing one exits 2 with the command that installs it
    instead of failing inside Ray's callbacks."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise SweepInputError(f"{feature} needs the package {module!r}, which cannot be imported ({exc}): "
                              f"install it with `{install}`") from None
