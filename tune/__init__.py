"""Ray Tune sweeps over the ``xbm`` trainer: the ``xbm-tune`` CLI, trainable, spaces, Parquet sink."""
import os

# Ray's driver folds log lines that differ only in numbers ("[repeated 7x across cluster]"), which would
# hide most of the trials' per-epoch lines (tune/results/live.py) from the sweep's terminal and the job's driver
# log. Lines matching this pattern are never folded; read when `ray` is first imported, so set here.
os.environ.setdefault("RAY_DEDUP_LOGS_ALLOW_REGEX", r"\[xbm\]")
