"""``xbm-tune sweep SPACE``: plan a sweep (everything checked before Ray starts), run it, print the outcome.
The flags, the plan's options and the outcome's summary serve ``submit`` and ``resume`` too."""
from __future__ import annotations

import argparse
import sys

from tune.options import DEFAULT_STORAGE, SweepInputError, SweepOptions, bad_input, cpus_option, metric_options
from xbm.checks import parse_overrides

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


def add_sweep_arguments(parser: argparse.ArgumentParser, cluster: bool = True) -> None:
    parser.add_argument("space", metavar="SPACE_OR_FILE",
                        help="a shipped space name (xbm-tune spaces) or a YAML file")
    d = SweepOptions()
    search = parser.add_argument_group("search")
    search.add_argument("--search", default=d.search,
                        help="optuna or tpe (seeded TPE) | gp (Gaussian process) | cmaes (CMA-ES) | random | grid "
                             "(default: grid for a grid-only space, else optuna)")
    search.add_argument("--num-samples", type=int, default=d.num_samples,
                        help="trials; with grid, repeats of the whole grid (default: 1 for grid, else 20)")
    search.add_argument("--metric", action="append", default=None, metavar="NAME[:MODE]",
                        help="metric to optimise (default recall_at_1); repeat for several objectives, e.g. "
                             "--metric recall_at_1:max --metric gpu_hours:min (ASHA stops on the first)")
    search.add_argument("--mode", default=d.mode, choices=["max", "min"],
                        help="mode of a --metric given without :MODE (default %(default)s)")
    search.add_argument("--seed", type=int, default=d.seed,
                        help="seeds the searcher, and every trial unless the space sets seed (default %(default)s)")
    search.add_argument("--warm-start", metavar="OLD_PATH", default=None,
                        help="seed TPE with an old sweep's finished trials (optuna only)")
    stop = parser.add_argument_group("early stopping")
    stop.add_argument("--scheduler", default=d.scheduler,
                      help="asha | hyperband | fifo | pbt (population-based training of the space's "
                           "'mutable: true' params) | pb2 (pbt exploring with a GP bandit) (default %(default)s)")
    stop.add_argument("--perturbation-interval", type=int, default=d.perturbation_interval, metavar="EPOCHS",
                      help="pbt, pb2: exploit and explore every EPOCHS epochs (default %(default)s)")
    stop.add_argument("--pbt-synch", action="store_true",
                      help="pbt, pb2: exploit and explore the whole population at once at each interval (every "
                           "trial waits for the slowest; default: each trial when it reaches the interval)")
    stop.add_argument("--max-epochs", type=int, default=None,
                      help="epoch budget per trial (default: the space's epochs)")
    stop.add_argument("--grace-period", type=int, default=d.grace_period,
                      help="ASHA's first rung, in epochs (default %(default)s)")
    stop.add_argument("--reduction-factor", type=float, default=d.reduction_factor,
                      help="keep 1/factor of trials per rung (default %(default)s)")
    stop.add_argument("--rungs", default=d.rungs, metavar="geometric|schedule|E1,E2,...",
                      help="asha: the epochs it judges trials at. geometric: --grace-period x --reduction-factor**k; "
                           "schedule: the last epoch before each LR drop (step, multistep) and 2 epochs after the "
                           "normaliser delay / memory start (the memory refilled, then one epoch on it); or the "
                           "epochs listed, e.g. 5,15,30 (default %(default)s; docs/sweeps.md)")
    stop.add_argument("--strict", action="store_true",
                      help="refuse (exit 2) when early stopping is unfair to a swept start epoch")
    stop.add_argument("--stop-collapsed", action=argparse.BooleanOptionalAction, default=d.stop_collapsed,
                      help="stop a trial whose loss saw no positive pair for 2 epochs, or still below raw pixels "
                           "after --grace-period epochs (default: on)")
    stop.add_argument("--time-budget", type=duration_option, default=None, metavar="DURATION",
                      help="e.g. 90s, 30m, 2h: then no new trial, running ones stop after their current epoch")
    stop.add_argument("--gpu-hours-budget", type=float, default=None, metavar="HOURS",
                      help="the same for the trials' wall time x GPUs")
    res = parser.add_argument_group("resources and faults")
    res.add_argument("--cpus-per-trial", type=cpus_option, default=d.cpus_per_trial,
                     help="CPUs per trial, or auto: 1 without GPUs, else the node's CPUs x --gpus-per-trial / its "
                          "GPUs (default %(default)s)")
    res.add_argument("--gpus-per-trial", type=float, default=d.gpus_per_trial,
                     help="fractions share a GPU, e.g. 0.5; each trial's CUDA memory is capped at its share; a "
                          "whole N > 1 is N workers of 1 GPU (--workers-per-trial N); per worker with "
                          "--workers-per-trial (default %(default)s)")
    res.add_argument("--workers-per-trial", type=int, default=d.workers_per_trial, metavar="N",
                     help="each trial a data-parallel run of N Ray Train workers (gloo on CPUs, NCCL on GPUs); "
                          "--cpus-per-trial and --gpus-per-trial are then per worker (default %(default)s)")
    res.add_argument("--checkpoint-period", type=float, default=d.checkpoint_period, metavar="SECONDS",
                     help="a full checkpoint every SECONDS of a trial's epochs and at its last epoch; 0 = every "
                          "epoch; the best epoch's weights are always kept (default %(default)s)")
    res.add_argument("--max-concurrent", type=int, default=None, help="cap on trials at once (default: resources)")
    res.add_argument("--max-failures", type=int, default=d.max_failures,
                     help="retries of a crashed trial from its last checkpoint (default %(default)s)")
    out = parser.add_argument_group("storage")
    out.add_argument("--storage", default=DEFAULT_STORAGE,
                     help="a folder, or a URI pyarrow.fs understands (s3://, gs://) for clusters (default %(default)s)")
    out.add_argument("--name", default=None, help="experiment name (default <space>-<UTC time>); must be new")
    out.add_argument("--log", action="append", default=None, metavar="NAME",
                     help="also log every trial's epochs to wandb (offline without a key or a connection: "
                          "<sweep>/wandb) or mlflow (MLFLOW_TRACKING_URI, else <sweep>/mlruns); repeat for both")
    if cluster:
        add_cluster_arguments(parser)
    cfg = parser.add_argument_group("training config")
    cfg.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="pin a TrainConfig value, e.g. --set dataset=toy --set lr=3e-4 (repeatable)")
    cfg.add_argument("--smoke-test", action="store_true",
                     help="tiny run to check an install or a space: 2 trials x 2 epochs on the toy data, mlp")


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    cluster = parser.add_argument_group("cluster")
    cluster.add_argument("--address", default=None,
                         help="the address of a running Ray cluster to join, as ray.init takes it (auto, HOST:PORT, "
                              "ray://HOST:10001), not its dashboard URL (that is submit's --address); default: "
                              "start a local Ray")
    cluster.add_argument("--dashboard", action=argparse.BooleanOptionalAction, default=True,
                         help="start the Ray dashboard on 127.0.0.1 and print its URL (default: on)")


def options_from(args: argparse.Namespace) -> SweepOptions:
    cluster = {"address": args.address, "dashboard": args.dashboard} if hasattr(args, "dashboard") else {}
    return SweepOptions(
        num_samples=args.num_samples, search=args.search, scheduler=args.scheduler, max_epochs=args.max_epochs,
        grace_period=args.grace_period, reduction_factor=args.reduction_factor, max_concurrent=args.max_concurrent,
        rungs=args.rungs,
        cpus_per_trial=args.cpus_per_trial, gpus_per_trial=args.gpus_per_trial,
        workers_per_trial=args.workers_per_trial,
        checkpoint_period=args.checkpoint_period, perturbation_interval=args.perturbation_interval,
        pbt_synch=args.pbt_synch,
        max_failures=args.max_failures,
        **metric_options(args.metric, args.mode), seed=args.seed, storage=args.storage, name=args.name,
        **cluster, strict=args.strict, warm_start=args.warm_start,
        overrides=parse_overrides(args.set, SweepInputError), smoke_test=args.smoke_test, loggers=tuple(args.log or ()),
        **{k: getattr(args, k) for k in ("stop_collapsed", "gpu_hours_budget") if hasattr(args, k)},
        time_budget_s=getattr(args, "time_budget", None))


def duration_option(text: str) -> float:
    """``--time-budget``'s value in seconds (``tune.trial.guards.parse_duration``), its rule on bad input."""
    from tune.trial.guards import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from tune.plan import prepare
    from tune.sweep import run_sweep

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
    guards = getattr(plan.scheduler, "guards", None)
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


def interrupted_line(path: str) -> str:
    """The last line of an interrupted sweep or resume: Ray's own advice (``Tuner.restore``) is replaced."""
    return f"interrupted: continue with `xbm-tune resume {path}`"


def finish(outcome) -> int:
    """Print the trials' statuses, the best trial (ranked by each trial's best epoch, as trials.parquet's
    ``best_<metric>``; Ray's "Current best trial" line ranks by the last epoch's value) and where the Parquet
    is; 1 when every trial failed or the fit was interrupted (``say_interrupted`` then ends the output)."""
    counts = ", ".join(f"{n} {status}" for status, n in sorted(outcome.counts().items())) or "no trials"
    print(f"\ntrials: {counts}")
    best = outcome.best()
    if best is not None:
        metric = outcome.metric
        swept = {k: best.get(f"config.{k}") for k in outcome.swept}
        epoch = best.get("best_epoch")
        epoch = int(epoch) if epoch is not None and epoch == epoch else "?"
        print(f"best trial (by its best epoch): {best['trial_id']} ({best.get('trial_name')}): "
              f"{metric}={best[f'best_{metric}']:.4g} at epoch {epoch}, status {best['status']}")
        shown = ", ".join(f"{k}={'(absent)' if v is None or v != v else v}" for k, v in swept.items())
        print(f"  config: {shown}")
    print(f"Parquet: {outcome.results_uri}/trials.parquet and {outcome.results_uri}/epochs/*.parquet")
    print(f"next: xbm-tune status {outcome.experiment_uri}  |  xbm-tune report {outcome.experiment_uri}")
    code = outcome.exit_code()
    if code and not getattr(outcome, "interrupted", False):
        print("every trial failed: see the error column of trials.parquet", file=sys.stderr)
    return code


def say_interrupted(outcome) -> None:
    """An interrupted fit's last line (after the summary): how to continue it."""
    if getattr(outcome, "interrupted", False):
        sys.stdout.flush()  # after the summary, in a log that takes both streams
        print(interrupted_line(outcome.experiment_uri), file=sys.stderr, flush=True)
