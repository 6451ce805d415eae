"""Argument groups that several commands share (a command imports these, never another command)."""
from __future__ import annotations

import argparse

from tune.driver.options import DEFAULT_STORAGE, SweepOptions, cpus_option, metric_options
from tune.errors import SweepInputError
from xbm.checks import parse_overrides


def add_rerun_arguments(parser: argparse.ArgumentParser) -> None:
    """The resource flags of a stage that re-runs a sweep's configurations (confirm, refit)."""
    ray = parser.add_argument_group("resources")
    ray.add_argument("--max-concurrent", type=int, default=None, help="trials at once (default: as resources allow)")
    ray.add_argument("--cpus-per-trial", type=float, default=None, help="default: the sweep's")
    ray.add_argument("--gpus-per-trial", type=float, default=None, help="default: the sweep's (fractions allowed)")
    ray.add_argument("--address", default=None,
                     help="the address of a running Ray cluster to join, as ray.init takes it (auto, HOST:PORT, "
                          "ray://HOST:10001), not its dashboard URL; default: start a local Ray")
    ray.add_argument("--dashboard", action=argparse.BooleanOptionalAction, default=True,
                     help="start Ray's dashboard on 127.0.0.1 (default on)")


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
    _add_stopping_arguments(parser, d)
    _add_resource_arguments(parser, d)
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


def _add_stopping_arguments(parser: argparse.ArgumentParser, d: SweepOptions) -> None:
    """The sweep's early-stopping flags (``d``: the options' defaults)."""
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


def _add_resource_arguments(parser: argparse.ArgumentParser, d: SweepOptions) -> None:
    """The sweep's resource and fault flags (``d``: the options' defaults)."""
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
    """``--time-budget``'s value in seconds (``tune.search.guards.parse_duration``), its rule on bad input."""
    from tune.search.guards import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: how to keep a local Ray and its dashboard alive across sweeps (``xbm-tune dashboard``)
DASHBOARD_HELP = """A sweep started without --address runs its own Ray, whose dashboard dies with the sweep.
To keep Ray and its dashboard alive across sweeps, start Ray once and join it:

  ray start --head --dashboard-host=127.0.0.1       # Ray and its dashboard on http://127.0.0.1:8265
  xbm-tune sweep quickstart --address auto           # the sweep joins it; the dashboard outlives it
  xbm-tune submit quickstart                         # or as a Ray job: the Jobs page shows its driver log
  ray stop                                           # when done

Token authentication is on by default: the page asks for the token that `ray get-auth-token` prints.
From another machine, tunnel first: ssh -L 8265:127.0.0.1:8265 <this host>.
What the dashboard shows of a sweep: docs/sweeps.md, "Watching a sweep"."""


def add_embedding_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of a command that embeds images with an export (embed, retrieve)."""
    parser.add_argument("--batch-size", type=int, default=64, help="(default %(default)s)")
    parser.add_argument("--device", default="auto",
                        help="auto (CUDA when present), cpu, cuda:0, ... (default %(default)s)")
    parser.add_argument("--on-error", choices=("stop", "skip"), default="stop",
                        help="an image that cannot be decoded: exit 2 naming it, or skip it (default %(default)s)")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bar (never drawn when stderr is not a terminal)")
