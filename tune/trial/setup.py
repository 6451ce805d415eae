"""One trial set-up, shared by every process that trains under Ray: the one-process trainable
(``tune.trial.trainable.run_trial``), each rank of a sweep's data-parallel trial and each worker of
``xbm-tune train --workers N`` (``tune.trial.data_parallel``).

:func:`setup_trial` goes config -> paths -> ``TrainConfig`` -> device -> seed -> CPUs, and says where the process
runs (:meth:`TrialSetup.where`); the caller builds its trainer (``tune.trial.base.build_trainer`` or
``xbm.trainer.Trainer``) and :func:`restore_and_prepare` restores a checkpoint into it and prepares it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from tune.results.keys import GPU_KEY, NODE_KEY, RELOCATED_KEY
from tune.results.trial_config import train_config
from tune.trial.base import assigned_device


@dataclass(frozen=True)
class TrialSetup:
    """A trial process's ``cfg`` (its device the one this process uses), its CPU threads (``cpus``), the GPUs Ray
    assigned to it (``gpu_ids``), its Ray node, and the sweep's paths that moved (``resume --set data_root=NEW``)."""

    cfg: Any
    cpus: int
    gpu_ids: list[str]
    node_id: str
    moved: dict[str, Any] = field(default_factory=dict)

    def where(self, gpu_ids: Optional[Sequence[str]] = None) -> dict[str, Any]:
        """The row's ``node_id``, ``gpu_ids`` (this process's, or every rank's ``gpu_ids``) and ``relocated``."""
        gpus = ",".join(self.gpu_ids if gpu_ids is None else gpu_ids) or None
        return {NODE_KEY: self.node_id, GPU_KEY: gpus, **({RELOCATED_KEY: self.moved} if self.moved else {})}


def setup_trial(config: Mapping[str, Any], paths: Mapping[str, Any] | None, cpus: float,
                rank_device: bool = False) -> TrialSetup:
    """The set-up of one trial process from Ray's (flat, dotted) ``config``: ``paths`` replace the config's values
    of those keys; the device is the GPU Ray assigned, else the CPU (``tune.trial.base.assigned_device``; with
    ``rank_device``, a Ray Train worker's GPU among those Train made visible); the seed is set; torch and the
    decoders use ``cpus`` threads (the process's share, not the node's). A config the trainer refuses raises
    ValueError before anything else happens."""
    import ray

    from xbm.runtime.cpus import use_cpus
    from xbm.training.rng import seed_everything

    moved = {k: v for k, v in (paths or {}).items() if config.get(k) != v}
    cfg = train_config({**config, **moved})
    gpu_ids = [str(g) for g in ray.get_gpu_ids()]
    device = assigned_device(cfg.device, gpu_ids)
    if rank_device and device.startswith("cuda"):
        import ray.train.torch

        device = str(ray.train.torch.get_device())  # this rank's GPU among those Train made visible
    cfg = cfg.replace(device=device)
    seed_everything(cfg.seed)
    return TrialSetup(cfg, use_cpus(cpus), gpu_ids, ray.get_runtime_context().get_node_id(), moved)


def restore_and_prepare(trainer, checkpoint, restore: Callable[[Any, str], None]) -> None:
    """Restore Tune's ``checkpoint`` (None: a fresh trial) into ``trainer`` with ``restore(trainer, folder)``, then
    prepare the trainer for its first epoch."""
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            restore(trainer, folder)
    trainer.prepare()
