"""``xbm-tune show-space NAME``: a space resolved and validated, as a sweep would run it."""
from __future__ import annotations

import argparse
import sys

from tune.errors import SweepInputError, bad_input
from xbm.checks import parse_overrides


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Print a search space resolved (its base config with --set pins, its swept parameters)\n"
                          "and validated, as a sweep would run it.")
    parser.epilog = "example:\n  xbm-tune show-space delay --set epochs=20"
    parser.add_argument("name", metavar="NAME", help="a shipped name or a YAML file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="pin a value")


def run(args: argparse.Namespace) -> int:
    """``xbm-tune show-space``: print a space resolved and validated.

    Args:
        args: the parsed arguments of ``xbm-tune show-space`` (``add_arguments``).

    Returns:
        The exit status: 0 when done.

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    from tune.search.spaces import load_space

    with bad_input():
        space = load_space(args.name, overrides=parse_overrides(args.set, SweepInputError) or None)
    print(space.describe())
    warning = space.combination_warning()
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return 0
