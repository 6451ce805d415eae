"""``xbm-tune status PATH``: a sweep's trials as a table, read from its Parquet (``tune.results.status``)."""
from __future__ import annotations

import argparse

from tune.errors import bad_input


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Print a sweep's trials as a table, read from its Parquet: counts per stage and status,\n"
                          "then the trials best first on the sweep's metric.")
    parser.epilog = "example:\n  xbm-tune status ~/xbm_sweeps/quickstart-20261121-081500 --top 10"
    parser.add_argument("path", metavar="PATH", help="the sweep folder (<storage>/<name>), or a URI")
    parser.add_argument("--top", type=int, default=20, help="rows to show, best first (default %(default)s)")
    parser.add_argument("--all", action="store_true", help="show every trial")


def run(args: argparse.Namespace) -> int:
    """``xbm-tune status``: a sweep's trials as a table, from its Parquet.

    Args:
        args: the parsed arguments of ``xbm-tune status`` (``add_arguments``).

    Returns:
        The exit status: 0 when done.

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    from tune.results.status import load_status, status_table

    with bad_input():
        record, trials = load_status(args.path)
    print(status_table(record, trials, top=None if args.all else args.top))
    return 0
