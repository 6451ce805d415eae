"""``xbm-tune resume PATH``: finish a sweep whose driver died, from its last checkpoints."""
from __future__ import annotations

import argparse

from tune.commands._arguments import add_cluster_arguments
from tune.commands._outcome import finish, say_interrupted
from tune.errors import SweepInputError
from xbm.checks import parse_overrides


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Finish a sweep whose driver died, from its trials' last checkpoints, into the same\n"
                          "sweep folder.")
    parser.epilog = ("examples:\n  xbm-tune resume ~/xbm_sweeps/quickstart-20261121-081500\n"
                     "  xbm-tune resume PATH --set data_root=/mnt/data/omniglot_small   # the data moved")
    parser.add_argument("path", metavar="PATH", help="the sweep folder (<storage>/<name>)")
    parser.add_argument("--set", action="append", default=[], metavar="data_root=PATH",
                        help="read the data set from another folder (the same files, moved; relative to here)")
    add_cluster_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """``xbm-tune resume``: finish a sweep whose driver died.

    Args:
        args: the parsed arguments of ``xbm-tune resume`` (``add_arguments``).

    Returns:
        The exit status: 0 when the sweep ran, 1 when every trial failed or Ctrl-C interrupted it.

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    from tune.driver.sweep import resume_sweep

    args.resume_path = args.path
    outcome = resume_sweep(args.path, address=args.address, dashboard=args.dashboard,
                           paths=parse_overrides(args.set, SweepInputError))
    code = finish(outcome)
    say_interrupted(outcome)
    return code
