"""A process's CPU share (xbm.runtime.cpus)."""
import torch
from joblib.externals.loky.backend import context as loky_context

from xbm.runtime.cpus import available_cpus, use_cpus


def test_use_cpus_caps_the_decode_threads_and_torchs_pool():
    """Bug caught: a Ray trial given 1 CPU on a many-core node decoding with the node's core count and
    running torch with as many intra-op threads, oversubscribing the node its neighbours share."""
    before = torch.get_num_threads()
    try:
        assert use_cpus(1) == 1 and available_cpus() == 1 and torch.get_num_threads() == 1
        assert use_cpus(1000) == available_cpus() <= 1000  # a limit above the affinity mask changes nothing
        assert use_cpus(0.5) == 1  # fractions of a CPU still get one thread
    finally:
        use_cpus(None)
        torch.set_num_threads(before)


def test_a_cpu_quota_counts_like_an_affinity_mask(monkeypatch):
    """Bug caught: CPUs counted from the affinity mask alone. Docker's ``--cpus=8`` or a Kubernetes CPU limit is
    a cgroup CFS quota that leaves every host core in the mask, so ``xbm-tune train`` in such a container on a
    128-core host started 127 loader workers and 128 torch threads. (joblib reads the quota; simulated here.)"""
    monkeypatch.setattr("os.cpu_count", lambda: 128)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(128)))
    monkeypatch.setattr(loky_context, "_cpu_count_cgroup", lambda os_cpu_count: 8)
    assert available_cpus() == 8
    monkeypatch.setattr(loky_context, "_cpu_count_cgroup", lambda os_cpu_count: os_cpu_count)   # no quota
    assert available_cpus() == 128
