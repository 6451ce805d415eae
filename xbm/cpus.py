"""How many CPUs this process may use: its affinity mask (what taskset, a SLURM allocation or a cgroup
cpuset gave it), not the machine's core count. Ray does not pin trials to cores: a trial's share comes
from Ray's assigned resources (``tune.trainable`` passes it to the ``Trainer`` as ``cpus``)."""
from __future__ import annotations

import os


def available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
