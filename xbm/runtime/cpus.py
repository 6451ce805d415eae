"""How many CPUs this process may use: its affinity mask (what taskset, a SLURM allocation or a cgroup
cpuset gave it) and its CPU quota (Docker's ``--cpus``, a Kubernetes CPU limit: a cgroup CFS quota, which
leaves every host core in the mask), as joblib's ``cpu_count`` reads them; capped by :func:`use_cpus` when a
scheduler gave the process fewer than it can see.

Ray does not pin trials to cores: a trial on a 16-core node with ``--cpus-per-trial 2`` sees all 16 in its
affinity mask. ``tune.trial.trainable`` calls ``use_cpus(2)`` so that torch's intra-op threads and the image
decode threads (``xbm.data.cache``) follow the trial's share instead of the node's core count."""
from __future__ import annotations

from typing import Optional

_limit: Optional[int] = None


def available_cpus() -> int:
    """The CPUs of the affinity mask and the cgroup quota, at most the :func:`use_cpus` limit. (The mask alone
    gave a container limited to 8 CPUs on a 128-core host 127 loader workers and 128 torch threads.)"""
    from joblib import cpu_count

    visible = cpu_count()
    return min(visible, _limit) if _limit is not None else visible


def use_cpus(cpus: Optional[float]) -> int:
    """Limit this process to ``cpus`` (rounded down, at least 1; None lifts the limit): later
    :func:`available_cpus` calls and torch's intra-op thread pool follow it. Returns the CPUs now used."""
    import torch

    global _limit
    _limit = None if cpus is None else max(int(cpus), 1)
    used = available_cpus()
    torch.set_num_threads(used)
    return used
