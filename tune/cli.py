"""``xbm-tune``: the dispatcher. Each command is a module of ``tune.commands`` with ``add_arguments(parser)``
and ``run(args) -> int``; ``COMMANDS`` lists them in the order ``--help`` shows.

``xbm-tune --version`` prints ``xbm-tune <version>`` (:mod:`xbm.version`) and exits 0.

Exit status: 0 done, 2 bad input (nothing started, nothing written; a path that is not what the command
expects, a results file that cannot be read), 1 failure or an interrupted sweep (Ctrl-C: its last line says
how to continue, ``tune.commands.sweep.interrupted_line``). An unexpected error prints one line; with
``XBM_TUNE_DEBUG=1`` in the environment, its full traceback (``DEBUG_VARIABLE``).

Output: a command prints its results on stdout; what the libraries log (``xbm``, ``tune``, ``analysis``: where
Ray runs, a collapsed epoch, a spent budget) goes to stderr, from INFO on, from WARNING on under ``--quiet`` and
from DEBUG on under ``-v``/``--verbose``, both given before the command (``tune.trial.logs.cli_logging``).
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from importlib import import_module
from typing import Optional, Sequence

from tune.errors import SweepInputError
from tune.trial.logs import DEFAULT, QUIET, VERBOSE, cli_logging
from xbm.version import package_version

#: set to 1 to see the full traceback of an unexpected error (for a bug report)
DEBUG_VARIABLE = "XBM_TUNE_DEBUG"

EXAMPLES = """examples:
  xbm-tune spaces                                  # the shipped search spaces
  xbm-tune show-space pcxbn_lambdas                # a space, resolved and validated
  xbm-tune sweep quickstart                        # a real sweep on CPU in a few minutes
  xbm-tune sweep quickstart --smoke-test --no-dashboard
  xbm-tune --quiet sweep quickstart                # only warnings and errors besides the command's results
  xbm-tune sweep full --num-samples 200 --gpus-per-trial 0.5 --max-epochs 50 --grace-period 5
  xbm-tune sweep my_space.yaml --search random --scheduler fifo --set dataset=omniglot \\
      --set data_root=../shared/datasets/omniglot_small --set model=resnet18 --set image_size=64
  xbm-tune sweep variants --address auto --storage s3://bucket/sweeps --name variants-v1
  xbm-tune submit quickstart --address http://127.0.0.1:8265   # as a Ray job on a running cluster
  xbm-tune dashboard                               # how to keep a local Ray and its dashboard alive
  xbm-tune export-optuna ~/xbm_sweeps/quickstart-20261121-081500   # then optuna-dashboard <file>
  xbm-tune status ~/xbm_sweeps/quickstart-20261121-081500
  xbm-tune resume ~/xbm_sweeps/quickstart-20261121-081500
  xbm-tune confirm ~/xbm_sweeps/quickstart-20261121-081500 --top 3 --seeds 3
  xbm-tune report ~/xbm_sweeps/quickstart-20261121-081500
  xbm-tune export ~/xbm_sweeps/quickstart-20261121-081500 --best --out embedder/
  xbm-tune embed embedder/ --images photos/ --out embeddings.parquet
  xbm-tune retrieve embedder/ --gallery embeddings.parquet --query queries/ --k 5 --grid top5.png
  xbm-tune oneshot embedder/ --runs omniglot/all_runs   # Omniglot's 20-way one-shot error, per run and mean
"""

#: command -> one line for ``--help``; its module is ``tune.commands.<command with _ for ->``
COMMANDS = {
    "sweep": "run a sweep over a search space",
    "submit": "run a sweep as a Ray job on a running cluster",
    "dashboard": "how to keep a local Ray and its dashboard alive",
    "export-optuna": "write a sweep's Optuna study (for optuna-dashboard) from its Parquet",
    "resume": "finish a sweep whose driver died",
    "spaces": "list the shipped search spaces",
    "show-space": "print a space resolved and validated",
    "status": "a sweep's trials as a table, from its Parquet",
    "train": "one training run (no Ray; --workers N: N data-parallel workers on a local Ray)",
    "confirm": "re-run the top configs over seeds into the same sweep folder",
    "refit": "retrain the chosen config on train+val (or all) classes over seeds, as the sweep's refit stage",
    "export": "a trial's (or a train run's) best weights as an embedder folder",
    "embed": "embed a folder of images with an export folder, into Parquet",
    "retrieve": "top-k gallery images per query with an export folder",
    "oneshot": "an export's error on Omniglot's 20-way one-shot runs",
    "report": "write report.md and figures into a sweep folder",
    "findings": "judge a findings sweep's claim: verdict lines, figure and CSVs",
}


def command_module(name: str) -> str:
    return f"tune.commands.{name.replace('-', '_')}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xbm-tune", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="Ray Tune sweeps for cross-batch-memory metric learning.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}",
                        help="print xbm-tune's version (the installed package's metadata) and exit")
    logs = parser.add_argument_group("log messages (on stderr; before the command)").add_mutually_exclusive_group()
    logs.add_argument("-q", "--quiet", dest="log_level", action="store_const", const=QUIET, default=DEFAULT,
                      help="only warnings and errors (a command's results still print)")
    logs.add_argument("-v", "--verbose", dest="log_level", action="store_const", const=VERBOSE,
                      help="debug messages too")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, formatter_class=argparse.RawDescriptionHelpFormatter)
        try:
            module = import_module(command_module(name))
        except ImportError as exc:  # a layer not installed in this checkout: say so when used
            command.set_defaults(func=lambda args, name=name, exc=exc: _missing(name, exc))
            continue
        module.add_arguments(command)
        command.set_defaults(func=module.run)
    return parser


def _missing(name: str, exc: Exception) -> int:
    print(f"error: `xbm-tune {name}` is unavailable: {exc}", file=sys.stderr)
    return 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)  # `submit` forwards the flags as given
    except SystemExit as exc:  # --help, --version (0) or a usage error (2), as a return value for callers, tests
        return int(exc.code or 0)
    with cli_logging(args.log_level):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except SweepInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a second Ctrl-C (Ray's Tuner.fit handles the first: tune.driver.sweep.fit)
        path = getattr(args, "resume_path", None)  # only a started sweep or resume can be continued
        from tune.commands.sweep import interrupted_line

        print(interrupted_line(path) if path else "interrupted", file=sys.stderr)
        return 1
    except Exception as exc:  # a failure after the input was accepted
        if os.environ.get(DEBUG_VARIABLE, "") not in ("", "0"):
            traceback.print_exc()
            return 1
        print(f"error: {type(exc).__name__}: {exc} (set {DEBUG_VARIABLE}=1 to see the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
