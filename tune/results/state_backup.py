"""A copy of Tune's experiment state that a killed driver cannot tear, and its use by ``resume``.

Ray 2.60 saves a sweep's state (``experiment_state-*.json``, the searcher's state, the callbacks' state) into
the driver's staging folder, then copies that folder to the sweep's storage in a background thread with
``pyarrow.fs.copy_files``: each file is opened (truncated) and then written. A driver killed during that copy
leaves a truncated file in the sweep folder. Seen in CI: an ``experiment_state-*.json`` of 0 bytes, after
which ``Tuner.restore`` logged "Failed to restore the run state", restarted the experiment, and its one
trial failed three times without a config.

``StateBackup`` (a callback, on file systems, not object stores: ``WHOLE_OBJECTS``; callbacks run in the
controller's thread after its snapshot is saved, so the staging files are whole then) packs the staging folder's
top-level files into one zip whenever they change and writes it into the sweep folder as ``STATE_BACKUP``
atomically (``analysis.location.Folder.write_bytes``).
``repair_state`` (``resume``, before ``Tuner.restore``) checks the experiment-state files and those the backup
holds, and when one is torn, puts back the backup's files, all of them: they are one consistent snapshot. A torn
file the backup lacks is kept aside as ``<name>.torn`` (never deleted), so that Tune takes the newest whole one.
"""
from __future__ import annotations

import io
import json
import logging
import os
import pickletools
import zipfile

from ray.tune import Callback

from analysis.location import Folder
from tune.errors import SweepInputError

STATE_BACKUP = "state-backup.zip"
PICKLE_PROTOCOL = b"\x80"  # the first byte of every pickle of protocol 2 or later (cloudpickle's: 5)
# An object store publishes an object only once its upload is complete, so Tune's copies there are never torn; a
# backup would only add requests at every snapshot (moto's S3 server took 56% of a core in a CI run with it, where
# 11-17% had been seen without).
WHOLE_OBJECTS = {"s3", "gcs"}
logger = logging.getLogger(__name__)


class StateBackup(Callback):
    """After each controller step: a new ``STATE_BACKUP`` when the staging folder's top-level files changed."""

    def __init__(self) -> None:
        self._stamp: tuple | None = None
        self._folder: Folder | None = None

    def on_step_end(self, iteration: int, trials: list, **info) -> None:
        if not trials:
            return
        storage = trials[0].storage
        if storage.storage_filesystem.type_name in WHOLE_OBJECTS:
            return
        staging = storage.experiment_driver_staging_path
        if not os.path.isdir(staging):
            return
        files = sorted((entry for entry in os.scandir(staging) if entry.is_file() and not entry.name.startswith(".")),
                       key=lambda entry: entry.name)
        stamp = tuple((entry.name, entry.stat().st_mtime_ns, entry.stat().st_size) for entry in files)
        if not files or stamp == self._stamp:
            return
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as pack:
            for entry in files:
                pack.write(entry.path, entry.name)
        if self._folder is None:  # one Folder: it creates its parent once
            self._folder = Folder(storage.experiment_fs_path, storage.storage_filesystem)
        try:
            self._folder.write_bytes(STATE_BACKUP, buffer.getvalue())
        except OSError as exc:  # a storage hiccup: the sweep goes on (as after Tune's own failed uploads), tried again
            logger.warning("could not write the sweep's %s (tried again at the next snapshot): %s", STATE_BACKUP, exc)
            return
        self._stamp = stamp


def whole(name: str, data: bytes) -> bool:
    """Whether a state file is complete: a pickle (Tune pickles the searcher's state, whatever the file's suffix)
    whose opcodes reach STOP, walked without running them (``pickletools.genops`` raises on a truncated one);
    JSON that parses; any other file not empty."""
    try:
        if data[:1] == PICKLE_PROTOCOL:
            for _ in pickletools.genops(data):
                pass
        elif name.endswith(".json"):
            json.loads(data)
        return bool(data)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError, "pickle exhausted before seeing STOP"
        return False


def repair_state(uri: str) -> list[str]:
    """Mend the sweep folder at ``uri`` before a resume; the names of the torn files found (none: nothing done).

    Torn files the backup holds are put back with all of the backup's files (one consistent snapshot); a torn
    file it does not hold (a sweep started before backups, or a snapshot newer than the backup) is moved aside
    to ``<name>.torn``, so that Tune takes the newest whole state instead. ``SweepInputError`` when no whole
    experiment state remains: Tune would restart the sweep from nothing."""
    folder = Folder(uri)
    backup: dict[str, bytes] = {}
    if folder.exists(STATE_BACKUP):
        try:
            with zipfile.ZipFile(io.BytesIO(folder.read_bytes(STATE_BACKUP))) as pack:
                backup = {name: pack.read(name) for name in pack.namelist()}
        except zipfile.BadZipFile as exc:  # written atomically, so only damaged after the fact: resume without it
            logger.warning("ignoring %s: %s", folder.display(STATE_BACKUP), exc)
    checked = sorted(set(backup) | set(state_files(folder)))
    torn = [name for name in checked if not folder.exists(name) or not whole(name, folder.read_bytes(name))]
    if not torn:
        return []
    for name in torn:
        if name not in backup and folder.exists(name):
            folder.fs.move(folder.path(name), folder.path(f"{name}.torn"))
    if any(name in backup for name in torn):
        for name, data in backup.items():
            folder.write_bytes(name, data)
    if not state_files(folder):
        raise SweepInputError(f"the sweep's experiment state {folder.display(torn[0])} is torn (its driver was "
                              f"killed while copying it; kept as {torn[0]}.torn) and no whole copy is left: start "
                              f"the sweep again with a new --name")
    return torn


def state_files(folder: Folder) -> list[str]:
    """Tune's experiment-state files at the top of the sweep folder, one per run of the driver."""
    return [name for name in folder.list("", suffix=".json") if name.startswith("experiment_state-")]
