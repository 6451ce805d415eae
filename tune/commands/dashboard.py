"""``xbm-tune dashboard``: how to keep a local Ray and its dashboard alive beyond one sweep."""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from tune.commands.submit import DASHBOARD_HELP

    print(DASHBOARD_HELP)
    return 0
