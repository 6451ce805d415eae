"""TensorBoard curves of a sweep, live, one run per trial named after the trial.

Ray Tune's own ``TBXLoggerCallback`` writes the scalars (tags ``ray/tune/<metric>``: Ray's fixed prefix,
then the trainer's metric names, one point per reported epoch at step = Tune's training iteration, and
the trial's hyper-parameters and last values in the HPARAMS tab when it ends). By default it puts the
event file in the trial folder (``trial_<id>/``), so TensorBoard's run names would be folder names.
``SweepTensorBoard`` changes only where the file goes: ``<sweep>/tensorboard/<trial name>/``. Like
Ray's, it writes into the driver's staging copy of the experiment, which Tune copies to the storage with
the experiment state (every epoch of any trial here: each checkpoint forces a snapshot; at most every
``TUNE_GLOBAL_CHECKPOINT_S`` = 10 s otherwise), so ``tensorboard --logdir <sweep>/tensorboard`` shows
the curves while the sweep runs, on a local folder or a bucket alike.
"""
from __future__ import annotations

import os

from ray.tune.logger import TBXLoggerCallback

TENSORBOARD_DIR = "tensorboard"


class SweepTensorBoard(TBXLoggerCallback):
    """Ray's ``TBXLoggerCallback`` with one run per trial at ``<sweep>/tensorboard/<trial name>``."""

    def log_trial_start(self, trial) -> None:
        if trial in self._trial_writer:
            self._trial_writer[trial].close()
        trial.init_local_path()  # creates the experiment's staging folder if needed (as Ray's does)
        folder = os.path.join(trial.storage.experiment_driver_staging_path, TENSORBOARD_DIR, str(trial))
        self._trial_writer[trial] = self._summary_writer_cls(folder, flush_secs=30)
        self._trial_result[trial] = {}
