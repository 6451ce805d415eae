"""``xbm-tune``: sweeps, submit, resume, spaces, status, train, confirm, report, export-optuna, dashboard,
export, embed, retrieve.

Exit status: 0 done, 2 bad input (nothing started, nothing written; a path that is not what the command
expects, a results file that cannot be read), 1 failure or an interrupted sweep (Ctrl-C: its last line says
how to continue, ``interrupted_line``). An unexpected error prints one line; with
``XBM_TUNE_DEBUG=1`` in the environment, its full traceback (``DEBUG_VARIABLE``).
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from contextlib import contextmanager
from typing import Callable, Optional, Sequence

from tune.options import DEFAULT_STORAGE, SweepInputError, SweepOptions, cpus_option, metric_options, parse_overrides

#: set to 1 to see the full traceback of an unexpected error (for a bug report)
DEBUG_VARIABLE = "XBM_TUNE_DEBUG"

EXAMPLES = """examples:
  xbm-tune spaces                                  # the shipped search spaces
  xbm-tune show-space pcxbn_lambdas                # a space, resolved and validated
  xbm-tune sweep quickstart                        # a real sweep on CPU in a few minutes
  xbm-tune sweep quickstart --smoke-test --no-dashboard
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

SWEEP_EXAMPLES = """examples:
  xbm-tune sweep quickstart
  xbm-tune sweep delay --max-epochs 30 --grace-period 11 --strict
  xbm-tune sweep pcxbn_lambdas --search grid --scheduler fifo --cpus-per-trial 2
  xbm-tune sweep full --num-samples 200 --gpus-per-trial 0.5 --warm-start ~/xbm_sweeps/full-v1
  xbm-tune sweep variants --gpus-per-trial 2 --cpus-per-trial 4      # each trial on 2 GPUs (2 DDP workers)
  xbm-tune sweep quickstart --smoke-test --no-dashboard --storage /tmp/sweeps
"""


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
                         help="join a running cluster (auto, HOST:PORT, ray://HOST:10001); default: start local Ray")
    cluster.add_argument("--dashboard", action=argparse.BooleanOptionalAction, default=True,
                         help="start the Ray dashboard on 127.0.0.1 and print its URL (default: on)")


def options_from(args: argparse.Namespace) -> SweepOptions:
    cluster = {"address": args.address, "dashboard": args.dashboard} if hasattr(args, "dashboard") else {}
    return SweepOptions(
        num_samples=args.num_samples, search=args.search, scheduler=args.scheduler, max_epochs=args.max_epochs,
        grace_period=args.grace_period, reduction_factor=args.reduction_factor, max_concurrent=args.max_concurrent,
        cpus_per_trial=args.cpus_per_trial, gpus_per_trial=args.gpus_per_trial,
        workers_per_trial=args.workers_per_trial,
        checkpoint_period=args.checkpoint_period, perturbation_interval=args.perturbation_interval,
        pbt_synch=args.pbt_synch,
        max_failures=args.max_failures,
        **metric_options(args.metric, args.mode), seed=args.seed, storage=args.storage, name=args.name,
        **cluster, strict=args.strict, warm_start=args.warm_start,
        overrides=parse_overrides(args.set), smoke_test=args.smoke_test, loggers=tuple(args.log or ()),
        **{k: getattr(args, k) for k in ("stop_collapsed", "gpu_hours_budget") if hasattr(args, k)},
        time_budget_s=getattr(args, "time_budget", None))


def duration_option(text: str) -> float:
    """``--time-budget``'s value in seconds (``tune.guards.parse_duration``), its rule on bad input."""
    from tune.guards import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_sweep(args: argparse.Namespace) -> int:
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
    from tune.tensorboard_logger import TENSORBOARD_DIR

    print(f"TensorBoard: tensorboard --logdir {plan.experiment_uri}/{TENSORBOARD_DIR}")
    for logger in plan.loggers:
        print(logger.describe())
    journal = plan.optuna_journal
    if journal:
        print(f"optuna-dashboard: optuna-dashboard {journal}")
    else:
        print(f"optuna-dashboard: after (or during) the sweep, xbm-tune export-optuna {plan.experiment_uri}")
    print(flush=True)


def cmd_submit(args: argparse.Namespace) -> int:
    from tune.plan import prepare
    from tune.submit import enable_token_auth_if_available, follow_help, submit

    with bad_input():  # the sweep's own checks, here, before anything reaches the cluster
        plan = prepare(args.space, options_from(args))
    argv = list(args.argv)
    forwarded = argv[argv.index("submit") + 1:] if "submit" in argv else argv
    job_id = submit(forwarded, plan.experiment, args.address)
    print(follow_help(job_id, args.address, enable_token_auth_if_available()))
    print(f"results (on the cluster's storage): {plan.results_uri}")
    return 0


def cmd_export_optuna(args: argparse.Namespace) -> int:
    from tune.optuna_study import export_optuna

    with bad_input():
        out, name, counts = export_optuna(args.path, args.out)
    shown = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "no trials"
    print(f"study {name!r} ({shown}) in {out}\nopen it: optuna-dashboard {out}")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from tune.submit import DASHBOARD_HELP

    print(DASHBOARD_HELP)
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from tune.sweep import resume_sweep

    args.resume_path = args.path
    outcome = resume_sweep(args.path, address=args.address, dashboard=args.dashboard, paths=parse_overrides(args.set))
    code = finish(outcome)
    say_interrupted(outcome)
    return code


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


def cmd_spaces(args: argparse.Namespace) -> int:
    from tune.spaces import list_spaces

    spaces = list_spaces()
    width = max((len(n) for n, _ in spaces), default=0)
    for name, description in spaces:
        print(f"{name:<{width}}  {description}")
    return 0


def cmd_show_space(args: argparse.Namespace) -> int:
    from tune.spaces import load_space

    with bad_input():
        space = load_space(args.name, overrides=parse_overrides(args.set) or None)
    print(space.describe())
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from tune.status import load_status, status_table

    with bad_input():
        record, trials = load_status(args.path)
    print(status_table(record, trials, top=None if args.all else args.top))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from analysis.report import write_report

    with bad_input():  # not a sweep folder, or its trials.parquet unreadable: exit 2 naming the path
        path = write_report(args.path)
    print(f"report: {path}")
    return 0


def _delegate(module: str, function: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from importlib import import_module

        return int(getattr(import_module(module), function)(args) or 0)

    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xbm-tune", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     description="Ray Tune sweeps for cross-batch-memory metric learning.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    raw = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser("sweep", help="run a sweep over a search space", epilog=SWEEP_EXAMPLES, formatter_class=raw)
    add_sweep_arguments(p)
    p.set_defaults(func=cmd_sweep)
    p = sub.add_parser("submit", help="run a sweep as a Ray job on a running cluster", formatter_class=raw,
                       epilog="examples:\n  xbm-tune submit quickstart --address http://127.0.0.1:8265\n"
                              "  xbm-tune submit full --num-samples 200 --gpus-per-trial 0.5 --address http://HEAD:8265")
    add_sweep_arguments(p, cluster=False)
    p.add_argument("--address", default="http://127.0.0.1:8265",
                   help="the cluster's dashboard URL, http://HEAD:8265 (default %(default)s)")
    p.set_defaults(func=cmd_submit)
    p = sub.add_parser("dashboard", help="how to keep a local Ray and its dashboard alive")
    p.set_defaults(func=cmd_dashboard)
    p = sub.add_parser("export-optuna", help="write a sweep's Optuna study (for optuna-dashboard) from its Parquet",
                       formatter_class=raw,
                       epilog="example:\n  xbm-tune export-optuna ~/xbm_sweeps/quickstart-20261121-081500\n"
                              "  optuna-dashboard ~/xbm_sweeps/quickstart-20261121-081500/results/optuna.journal")
    p.add_argument("path", metavar="PATH", help="the sweep folder (<storage>/<name>)")
    p.add_argument("--out", default=None,
                   help="the journal file (default <PATH>/results/optuna.journal; ./<name>.optuna.journal for a bucket)")
    p.set_defaults(func=cmd_export_optuna)
    p = sub.add_parser("resume", help="finish a sweep whose driver died", formatter_class=raw,
                       epilog="examples:\n  xbm-tune resume ~/xbm_sweeps/quickstart-20261121-081500\n"
                              "  xbm-tune resume PATH --set data_root=/mnt/data/omniglot_small   # the data moved")
    p.add_argument("path", metavar="PATH", help="the sweep folder (<storage>/<name>)")
    p.add_argument("--set", action="append", default=[], metavar="data_root=PATH",
                   help="read the data set from another folder (the same files, moved; relative to here)")
    add_cluster_arguments(p)
    p.set_defaults(func=cmd_resume)
    sub.add_parser("spaces", help="list the shipped search spaces").set_defaults(func=cmd_spaces)
    p = sub.add_parser("show-space", help="print a space resolved and validated", formatter_class=raw,
                       epilog="example:\n  xbm-tune show-space delay --set epochs=20")
    p.add_argument("name", metavar="NAME", help="a shipped name or a YAML file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="pin a value")
    p.set_defaults(func=cmd_show_space)
    p = sub.add_parser("status", help="a sweep's trials as a table, from its Parquet", formatter_class=raw,
                       epilog="example:\n  xbm-tune status ~/xbm_sweeps/quickstart-20261121-081500 --top 10")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--top", type=int, default=20, help="rows to show, best first (default %(default)s)")
    p.add_argument("--all", action="store_true", help="show every trial")
    p.set_defaults(func=cmd_status)
    # tune.train_workers: xbm.train_cli's flags and run, plus --workers N (a local Ray Train run)
    _add_delegated(sub, "train", "one training run (no Ray; --workers N: N data-parallel workers on a local Ray)",
                   "tune.train_workers")
    _add_delegated(sub, "confirm", "re-run the top configs over seeds into the same sweep folder", "tune.confirm")
    _add_delegated(sub, "export", "a trial's (or a train run's) best weights as an embedder folder", "tune.export")
    _add_delegated(sub, "embed", "embed a folder of images with an export folder, into Parquet", "xbm.embed_cli")
    _add_delegated(sub, "retrieve", "top-k gallery images per query with an export folder", "tune.retrieve")
    _add_delegated(sub, "oneshot", "an export's error on Omniglot's 20-way one-shot runs", "tune.commands.oneshot")
    p = sub.add_parser("report", help="write report.md and figures into a sweep folder")
    p.add_argument("path", metavar="PATH")
    p.set_defaults(func=cmd_report)
    return parser


def _add_delegated(sub, name: str, help_text: str, module: str) -> None:
    """A sub-command whose flags and body live in ``module`` (``add_arguments``, ``run``)."""
    from importlib import import_module

    parser = sub.add_parser(name, help=help_text, formatter_class=argparse.RawDescriptionHelpFormatter)
    try:
        import_module(module).add_arguments(parser)
    except ImportError as exc:  # a layer not installed in this checkout: say so when used
        parser.set_defaults(func=lambda args, exc=exc: _missing(name, exc))
        return
    parser.set_defaults(func=_delegate(module, "run"))


def _missing(name: str, exc: Exception) -> int:
    print(f"error: `xbm-tune {name}` is unavailable: {exc}", file=sys.stderr)
    return 1


@contextmanager
def bad_input():
    """Turn the input checks' ValueErrors (SpaceError, TrainConfig's, a missing file) into exit 2."""
    try:
        yield
    except (ValueError, FileNotFoundError) as exc:
        if isinstance(exc, SweepInputError):
            raise
        raise SweepInputError(str(exc)) from exc


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)  # `submit` forwards the flags as given
    except SystemExit as exc:  # --help (0) or a usage error (2), as a return value for callers and tests
        return int(exc.code or 0)
    try:
        return args.func(args)
    except SweepInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a second Ctrl-C (Ray's Tuner.fit handles the first: tune.sweep.fit)
        path = getattr(args, "resume_path", None)  # only a started sweep or resume can be continued
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
