"""``xbm-tune spaces``: the shipped search spaces, one line each."""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("List the shipped search spaces (search_spaces/*.yaml), one line each: the name that\n"
                          "`xbm-tune sweep NAME` takes, and the space's description.")


def run(args: argparse.Namespace) -> int:
    """``xbm-tune spaces``: list the shipped search spaces.

    Args:
        args: the parsed arguments of ``xbm-tune spaces`` (``add_arguments``).

    Returns:
        The exit status: 0 when done.
    """
    from tune.search.spaces import list_spaces

    spaces = list_spaces()
    width = max((len(n) for n, _ in spaces), default=0)
    for name, description in spaces:
        print(f"{name:<{width}}  {description}")
    return 0
