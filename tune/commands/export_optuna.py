"""``xbm-tune export-optuna PATH``: a sweep's Optuna study (for optuna-dashboard), written from its Parquet."""
from __future__ import annotations

import argparse

from tune.errors import bad_input


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Write a sweep's Optuna study, rebuilt from its Parquet (results/trials.parquet), as a\n"
                          "journal file that optuna-dashboard opens.")
    parser.epilog = ("example:\n  xbm-tune export-optuna ~/xbm_sweeps/quickstart-20261121-081500\n"
                     "  optuna-dashboard ~/xbm_sweeps/quickstart-20261121-081500/results/optuna.journal")
    parser.add_argument("path", metavar="PATH", help="the sweep folder (<storage>/<name>)")
    parser.add_argument("--out", default=None,
                        help="the journal file (default <PATH>/results/optuna.journal; ./<name>.optuna.journal for a "
                             "bucket)")


def run(args: argparse.Namespace) -> int:
    """``xbm-tune export-optuna``: write a sweep's Optuna study (for optuna-dashboard) from its Parquet.

    Args:
        args: the parsed arguments of ``xbm-tune export-optuna`` (``add_arguments``).

    Returns:
        The exit status: 0 when done.

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    from tune.search.optuna_study import export_optuna

    with bad_input():
        out, name, counts = export_optuna(args.path, args.out)
    shown = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "no trials"
    print(f"study {name!r} ({shown}) in {out}\nopen it: optuna-dashboard {out}")
    return 0
