"""A process's CPU share (xbm.cpus)."""
import torch

from xbm.cpus import available_cpus, use_cpus


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
