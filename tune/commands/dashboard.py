"""``xbm-tune dashboard``: how to keep a local Ray and its dashboard alive beyond one sweep."""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Print how to keep a local Ray and its dashboard alive across sweeps: start Ray once,\n"
                          "then join it with `xbm-tune sweep --address auto` or `xbm-tune submit`.")


def run(args: argparse.Namespace) -> int:
    """``xbm-tune dashboard``: how to keep a local Ray and its dashboard alive.

    Args:
        args: the parsed arguments of ``xbm-tune dashboard`` (``add_arguments``).

    Returns:
        The exit status: 0 when done.
    """
    from tune.commands._arguments import DASHBOARD_HELP

    print(DASHBOARD_HELP)
    return 0
