"""What ``xbm-tune sweep`` and ``xbm-tune resume`` print when a sweep's fit returns: the trials' statuses, the best
trial, where the Parquet is, and how to continue an interrupted one."""
from __future__ import annotations

import sys


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
