"""``--log wandb``: Ray's ``WandbLoggerCallback``, one W&B run per trial (id = the trial id, name = the trial
name, group = the sweep), its config and every reported epoch (W&B step = Tune's training iteration = the
epoch).

**Online or offline.** W&B runs online only when the user has a key (``WANDB_API_KEY``, or ``wandb login``
done) and the W&B host answers within ``PROBE_TIMEOUT_S``; otherwise offline, with nothing sent. An explicit
``WANDB_MODE`` (``offline``, ``online``, ``disabled``) wins. Offline runs sit in ``<sweep>/wandb/offline-run-*``
and the sweep prints the ``wandb sync`` command that uploads them later. Ray starts one logging actor per
trial on the driver's node, so the folder is a local one: offline W&B needs a local ``--storage``.

**A run that fails is said.** Ray's logging actor ends with the error in a future nobody reads (at most an
"Unhandled error" among Ray's log lines): a trial whose ``wandb.init`` timed out (on a loaded machine) or
whose disk was full had no W&B run, and the sweep's own lines said nothing. Each failure is written to
``<sweep>/wandb/failed-<trial id>.txt``, and the sweep's closing lines name the trials and their errors (their
epochs are in the Parquet files all the same).
"""
from __future__ import annotations

import os
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

from ray.air.integrations.wandb import WandbLoggerCallback, _WandbLoggingActor

from analysis.location import local_path
from tune.errors import SweepInputError

WANDB_DIR = "wandb"
DEFAULT_PROJECT = "xbm-tune"
DEFAULT_HOST = "https://api.wandb.ai"
PROBE_TIMEOUT_S = 3.0


def has_key(host: str) -> bool:
    """Whether W&B has credentials for ``host`` here, read locally: ``WANDB_API_KEY``, or the .netrc entry
    that ``wandb login`` writes (read with wandb's own reader; nothing is sent)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    from wandb.sdk.lib.wbauth import read_netrc_auth

    try:
        return bool(read_netrc_auth(host=host))
    except Exception:  # a malformed entry: no usable key
        return False


def reachable(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a TCP connection to ``url``'s host opens within ``timeout_s`` (name lookup included: it runs
    in a daemon thread, so a lookup that hangs costs ``timeout_s`` and no more)."""
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    opened = []

    def connect() -> None:
        try:
            socket.create_connection((parsed.hostname, port), timeout=timeout_s).close()
            opened.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(timeout_s + 0.5)
    return bool(opened)


def wandb_mode() -> str:
    """``WANDB_MODE`` when set; else ``online`` with a key and a connection to ``WANDB_BASE_URL`` (W&B's
    host by default), ``offline`` otherwise (no key: nothing is probed)."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    host = os.environ.get("WANDB_BASE_URL") or DEFAULT_HOST
    return "online" if has_key(host) and reachable(host) else "offline"


FAILED_PREFIX = "failed-"


class SweepWandbActor(_WandbLoggingActor):
    """Ray's logging actor, which leaves the error of a run that fails in ``<dir>/wandb/failed-<trial id>.txt``
    (``dir``: the sweep's folder, given to ``wandb.init``), then fails as before."""

    def run(self):
        try:
            super().run()
        except BaseException as exc:
            folder = os.path.join(self.kwargs.get("dir") or self._logdir, WANDB_DIR)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"{FAILED_PREFIX}{self.kwargs.get('id')}.txt"), "w") as out:
                out.write(f"{type(exc).__name__}: {exc}\n")
            raise


class SweepWandb(WandbLoggerCallback):
    """Ray's callback with the mode chosen once (``wandb_mode``), the files in ``<sweep>/wandb``, and the runs
    that failed named at the end (``SweepWandbActor``)."""

    _logger_actor_cls = SweepWandbActor

    def __init__(self, sweep_dir: str, experiment: str, mode: str) -> None:
        # wandb.init(dir=D) writes D/wandb/...; the mode goes to each trial's wandb.init (Ray's logging actors
        # get no environment from the driver but the API key)
        super().__init__(project=os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT, group=experiment,
                         mode=mode, dir=sweep_dir)
        self.sweep_dir = sweep_dir
        self.mode = mode

    @property
    def folder(self) -> str:
        return os.path.join(self.sweep_dir, WANDB_DIR)

    def setup(self, *args, **kwargs) -> None:
        os.makedirs(self.sweep_dir, exist_ok=True)
        if self.mode == "online":
            super().setup(*args, **kwargs)  # Ray's key check (the key exists: wandb_mode saw it)
        # offline or disabled: Ray's setup would demand a key unless WANDB_MODE is in the environment

    def __del__(self) -> None:
        if self._trial_logging_actors:  # Ray's __del__ fails at interpreter exit (its module globals are gone)
            super().__del__()

    def describe(self) -> str:
        return f"W&B ({self.mode}): project {self.project}, group {self.group}, files in {self.folder}"

    def failures(self) -> dict[str, str]:
        """Trial id -> the error of its W&B run, for each run that failed."""
        if not os.path.isdir(self.folder):
            return {}
        return {name[len(FAILED_PREFIX):-len(".txt")]: Path(self.folder, name).read_text().strip()
                for name in sorted(os.listdir(self.folder)) if name.startswith(FAILED_PREFIX) and name.endswith(".txt")}

    def closing(self) -> str | None:
        """The lines printed after the sweep: the runs that failed, and how to upload offline runs."""
        lines = []
        failed = self.failures()
        if failed:
            lines.append(f"warning: W&B logging failed for {len(failed)} trial(s), whose epochs are in the Parquet "
                         f"files only: " + "; ".join(f"{trial}: {error}" for trial, error in failed.items()))
        if self.mode == "offline":
            lines.append(f"W&B runs are offline; upload them with: wandb sync {self.folder}/offline-run-*")
        return "\n".join(lines) or None


def build_wandb(storage_path: str, experiment: str) -> SweepWandb:
    root = local_path(storage_path)
    if root is None:
        mode = wandb_mode()
        if mode == "offline":
            raise SweepInputError(f"--log wandb runs offline here (no W&B key, or no connection), and offline runs "
                                  f"are written to a local folder, but --storage is {storage_path!r}: use a local "
                                  f"--storage, or set WANDB_API_KEY on a machine that reaches W&B")
        return SweepWandb(os.path.join(os.path.expanduser("~"), "xbm_wandb", experiment), experiment, mode)
    return SweepWandb(os.path.join(root, experiment), experiment, wandb_mode())
