"""A trial's checkpoint policy: full checkpoints every ``--checkpoint-period`` seconds of the trial's
epochs and at its last epoch; its best epoch's weights always kept; one full checkpoint left when it ends.

- **Full checkpoint** (``trainer.pt``: weights, optimiser, memory, normaliser and RNG state, for an exact
  resume) costs about 300 MB at ResNet50 scale. Written every epoch it is a fixed cost per epoch and, kept
  twice per trial, about 150 GB for a 200-trial sweep. A killed worker or driver resumes from the last one
  and loses at most one period of epochs.
- **Best weights** (``best_weights.pt`` in the trial's folder, beside its checkpoints): the model's weights
  at the epoch with the best value of the sweep's metric, whenever it improves, whatever the period. The
  copy to the CPU happens at once; the write runs in a background thread while the next epoch trains.
  Tune stops a trial (ASHA, the budget) or reuses its actor without waiting for the trial's thread, and the
  writer dies with the process, so the trainable's ``cleanup`` and ``reset_config`` first call
  ``xbm.training.best_weights.finish_best_weights``; a data-parallel rank 0, which Tune cannot wait for, writes
  before reporting. ``xbm-tune train`` keeps its best weights with the same class
  (``xbm.training.best_weights.BestWeights``).
- **When a trial ends** (completed or stopped by the scheduler), :class:`KeepLatestCheckpoint` deletes all
  but its newest full checkpoint. While it runs, Tune keeps two (``tune.driver.sweep.KEEP_CHECKPOINTS``: a killed
  driver's last snapshot may still name the older one). Under population-based training every checkpoint
  is kept until the sweep ends (an exploit may restore any trial's last-perturbation checkpoint), then pruned.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow.fs as pafs
from ray.tune import Callback

TRIAL_STATE = "trial.json"  # in each full checkpoint: the policy's own state (best so far, period clock)
DEFAULT_PERIOD_S = 600.0


def storage_uri(fs: pafs.FileSystem, path: str) -> str:
    """A path on ``fs`` as a URI a user can pass back (``s3://bucket/...``; local paths stay paths)."""
    scheme = {"s3": "s3", "gcs": "gs", "hdfs": "hdfs"}.get(fs.type_name)
    return f"{scheme}://{path.lstrip('/')}" if scheme else path


@dataclass
class CheckpointClock:
    """Due every ``period_s`` seconds of epochs (0: every epoch), and at the last epoch."""

    period_s: float = DEFAULT_PERIOD_S
    since_s: float = 0.0

    def due(self, epoch_seconds: float, last: bool) -> bool:
        self.since_s += epoch_seconds
        if last or self.since_s >= self.period_s:
            self.since_s = 0.0
            return True
        return False


class KeepLatestCheckpoint(Callback):
    """When a trial completes (its budget, or stopped by the scheduler), delete every full checkpoint of it
    but the newest. Failed trials keep theirs: ``resume`` may restart them. ``at_end``: prune every completed
    trial when the sweep ends instead (population-based training may still restore a finished trial's older
    checkpoint into another trial until then)."""

    def __init__(self, at_end: bool = False) -> None:
        self.at_end = at_end

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        if not self.at_end:
            _prune(trial)

    def on_experiment_end(self, trials, **info) -> None:
        if self.at_end:
            for trial in trials:
                if trial.status == "TERMINATED":
                    _prune(trial)


def _prune(trial) -> None:
    storage = getattr(trial, "storage", None)
    if storage is not None:
        prune_checkpoints(storage.storage_filesystem, storage.trial_fs_path)


def prune_checkpoints(fs: pafs.FileSystem, trial_folder: str, keep: int = 1) -> list[str]:
    """Delete all but the ``keep`` newest ``checkpoint_<n>`` folders of ``trial_folder``; returns the deleted."""
    infos = fs.get_file_info(pafs.FileSelector(trial_folder, allow_not_found=True))
    folders = sorted(i.path for i in infos if i.type == pafs.FileType.Directory and i.base_name.startswith("checkpoint_"))
    doomed = folders[:-keep] if keep else folders
    for path in doomed:
        fs.delete_dir(path)
    return doomed
