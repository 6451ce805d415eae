"""What every trial process shares, one worker or a data-parallel rank: its ``TrainConfig`` from Ray's dict,
its device, its policy, its ``Trainer``, and the last row of a trial ended by an error every retry would meet.

A config the trainer refuses, a non-finite loss, a CUDA out-of-memory error, a bad image under
``on_bad_image=stop`` and loader workers too many for ``/dev/shm`` are deterministic: retrying would only burn
``max_failures``, so the trial reports one last row carrying ``error`` and ``stop_reason`` and the worst value of
the metric (schedulers rank it last).
"""
from __future__ import annotations

import logging
import math
import os
import socket
from dataclasses import dataclass
from typing import Any, Mapping

from tune.results import live
from tune.results.keys import ERROR_KEY, NOSET_VISIBLE_DEVICES, STOP_REASON_KEY
from tune.trial.checkpoints import DEFAULT_PERIOD_S


CONFIG_REFUSED = "config refused (see error)"

log = logging.getLogger(__name__)


class MissingOnNodeError(FileNotFoundError):
    """A trial's data set or ``pretrained_path`` is missing on the node the trial runs on. The message
    is the underlying error's, then a last line naming the node and the path (the line trials.parquet's
    ``error`` column keeps)."""


def assigned_device(requested: str, gpu_ids: list) -> str:
    """The device this trial may use: the GPU Ray assigned (Ray sets CUDA_VISIBLE_DEVICES, so it is
    ``cuda`` inside the process), else CPU. ``auto`` must not grab a GPU Ray did not assign, which
    the trainer's own ``auto`` would do on a shared GPU machine. Under Ray's
    ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES`` the process sees the node's GPUs, and plain ``cuda``
    would put every trial on the first: the assigned one is named (its place among CUDA_VISIBLE_DEVICES)."""
    import torch

    if requested != "auto":
        return requested
    if not (gpu_ids and torch.cuda.is_available()):
        return "cpu"
    if os.environ.get(NOSET_VISIBLE_DEVICES, "").lower() not in ("1", "true"):  # Ray's own test of it
        return "cuda"
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    gpu = str(gpu_ids[0])
    return f"cuda:{visible.index(gpu) if gpu in visible else int(gpu)}"


@dataclass(frozen=True)
class TrialPolicy:
    """How a sweep runs each of its trials, beyond the trial's config: the full-checkpoint period (seconds
    of epochs; 0 = every epoch), the epochs evaluated whatever ``eval_every`` says (the scheduler's rungs),
    and for population-based training the checkpoint interval in epochs and the mutable keys."""

    checkpoint_period_s: float = DEFAULT_PERIOD_S
    evaluate_at: tuple[int, ...] = ()
    checkpoint_every: int = 0  # also a full checkpoint every this many epochs (PBT: its interval; 0: none)
    mutable: tuple[str, ...] = ()  # keys a restore may change (PBT's explore: ``Trainer.load_state_dict``)


def worst_value(mode: str) -> float:
    """The value a scheduler ranks last: -inf when maximising, +inf when minimising."""
    return -math.inf if mode == "max" else math.inf


def deterministic_failure(exc: BaseException, cfg, epoch: int, gpu_share: float) -> tuple[int, str] | None:
    """``(epoch, reason)`` for an error that every retry would meet again (module docstring): a non-finite
    loss, a CUDA out-of-memory error, a bad image under ``on_bad_image=stop``, loader workers too many for
    ``/dev/shm``; None for any other.
    ``epoch`` is the last epoch reported."""
    import torch

    from tune.trial.resources import RankOutOfMemoryError, out_of_memory_reason
    from xbm.errors import BadImageError, NonFiniteLossError, SharedMemoryError

    if isinstance(exc, NonFiniteLossError):
        return max(exc.epoch, epoch), "non-finite loss"
    if isinstance(exc, RankOutOfMemoryError):  # measured on the rank (tune.trial.data_parallel)
        return epoch + 1, exc.reason
    if isinstance(exc, torch.OutOfMemoryError):
        return epoch + 1, out_of_memory_reason(cfg.batch_size, gpu_share or 1.0)
    if isinstance(exc, BadImageError):  # on_bad_image=stop: every retry would stop on the same file
        return epoch + 1, "bad image (on_bad_image=stop)"
    if isinstance(exc, SharedMemoryError):  # /dev/shm's size, not its use: a retry cannot fit either
        return epoch + 1, "shared memory too small for the loader workers (/dev/shm; see error)"
    return None


def refused_row(exc: ValueError, metric: str, mode: str, trial_id: str) -> dict[str, Any]:
    """The error row of a trial whose config ``TrainConfig`` refused (``exc``), logged as a warning. As
    deterministic as the errors above: every retry would be refused again (reported at epoch 1, trained none)."""
    log.warning("%s trial %s failed before training: config refused: %s", live.PREFIX, trial_id, exc)
    return error_row((1, CONFIG_REFUSED), metric, mode, {}, exc)


def error_row(failure: tuple[int, str], metric: str, mode: str, where: Mapping[str, Any],
              exc: BaseException) -> dict[str, Any]:
    """The last result of a trial ended by a deterministic error: not retried, ranked last."""
    return {"epoch": failure[0], metric: worst_value(mode), **where, ERROR_KEY: f"{type(exc).__name__}: {exc}",
            STOP_REASON_KEY: failure[1]}


def build_trainer(cfg, cpus: int, policy: TrialPolicy, node_id: str, sweep: str | None, ranks=None):
    """The trial's Trainer, reusing the references and warm-up that an earlier trial of the sweep computed
    on this node for the same inputs (``xbm.training.reuse``); files missing on this node raise
    :class:`MissingOnNodeError` naming it. ``ranks`` (``xbm.training.distributed.Ranks``): this process's place in a
    data-parallel trial (``tune.trial.data_parallel``); None for a one-worker trial."""
    from ray.util import get_node_ip_address

    from xbm.trainer import Trainer
    from xbm.training.reuse import default_folder

    try:
        # num_workers=auto: the CPUs Ray gave this trial (--cpus-per-trial) minus one
        distributed = {} if ranks is None else {"ranks": ranks}
        return Trainer(cfg, cpus=cpus, evaluate_at=policy.evaluate_at, reuse_dir=default_folder(sweep or "default"),
                       **distributed)
    except FileNotFoundError as exc:  # DatasetNotFoundError, or a missing pretrained_path file
        missing = getattr(exc, "filename", None) or cfg.pretrained_path
        raise MissingOnNodeError(
            f"{exc}\nmissing on node {socket.gethostname()} ({get_node_ip_address()}, Ray node "
            f"{node_id[:12]}): {missing}. Every node that runs trials needs the files at this path (a "
            f"shared file system, or a copy on each node); the driver's check only saw its own") from exc
