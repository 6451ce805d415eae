"""``xbm-tune sweep SPACE``: plan a sweep (everything checked before Ray starts), run it, print the outcome.
The flags, the plan's options and the outcome's summary serve ``submit`` and ``resume`` too."""
from __future__ import annotations

import argparse
import sys

from tune.commands._arguments import add_sweep_arguments, options_from
# interrupted_line: tune.cli names it here
from tune.commands._outcome import finish, interrupted_line, say_interrupted  # noqa: F401
from tune.errors import bad_input

SWEEP_EXAMPLES = """examples:
  xbm-tune sweep quickstart
  xbm-tune sweep delay --max-epochs 30 --grace-period 11 --strict
  xbm-tune sweep variants --rungs schedule          # ASHA judges before each LR drop and after the delay
  xbm-tune sweep pcxbn_lambdas --search grid --scheduler fifo --cpus-per-trial 2
  xbm-tune sweep full --num-samples 200 --gpus-per-trial 0.5 --warm-start ~/xbm_sweeps/full-v1
  xbm-tune sweep variants --gpus-per-trial 2 --cpus-per-trial 4      # each trial on 2 GPUs (2 DDP workers)
  xbm-tune sweep quickstart --smoke-test --no-dashboard --storage /tmp/sweeps
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Plan a sweep over a search space (every check made before Ray starts: the space, its\n"
                          "configs, the data, the flags), run its trials on Ray Tune and print the outcome. The\n"
                          "results (results/trials.parquet, results/sweep.json) go to <storage>/<name>.")
    parser.epilog = SWEEP_EXAMPLES
    add_sweep_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """``xbm-tune sweep``: run a sweep over a search space.

    Args:
        args: the parsed arguments of ``xbm-tune sweep`` (``add_arguments``).

    Returns:
        The exit status: 0 when the sweep ran, 1 when every trial failed or Ctrl-C interrupted it.

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    from tune.driver.plan import prepare
    from tune.driver.sweep import run_sweep

    with bad_input():  # everything is checked here: nothing started, nothing written
        plan = prepare(args.space, options_from(args))
    for warning in plan.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if plan.warm is not None:
        print(f"warm start: {plan.warm.summary()}")
    print(f"sweep {plan.experiment}: space {plan.space.name}, search {plan.options.search}, scheduler "
          f"{plan.options.scheduler}, {plan.options.num_samples} sample(s), {plan.max_epochs} epoch(s) max")
    print(f"results: {plan.results_uri}")
    print_watch_help(plan)
    args.resume_path = plan.experiment_uri  # a second Ctrl-C (KeyboardInterrupt) names it too
    outcome = run_sweep(plan)
    code = finish(outcome)
    for line in filter(None, (logger.closing() for logger in plan.loggers)):  # W&B's sync command
        print(line)
    guards = plan.scheduler.guards if plan.scheduler is not None else None
    if guards is not None and guards.spent:  # the last line says the sweep ended on its budget
        print(f"{guards.spent}: the sweep stopped its trials after their current epoch; the Parquet is complete")
    say_interrupted(outcome)
    return code


def print_watch_help(plan) -> None:
    """Where to watch this sweep besides Ray's dashboard (docs/sweeps.md "Watching a sweep")."""
    from tune.results.tensorboard_logger import TENSORBOARD_DIR

    print(f"TensorBoard: tensorboard --logdir {plan.experiment_uri}/{TENSORBOARD_DIR}")
    for logger in plan.loggers:
        print(logger.describe())
    journal = plan.optuna_journal
    if journal:
        print(f"optuna-dashboard: optuna-dashboard {journal}")
    else:
        print(f"optuna-dashboard: after (or during) the sweep, xbm-tune export-optuna {plan.experiment_uri}")
    print(flush=True)
