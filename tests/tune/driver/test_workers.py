"""tune/driver/workers.py: the shape of a data-parallel trial (workers, each one's resources, the GPUs it bills),
the batch and GPU checks, and how many multi-worker trials Tune may run at once."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from tune.driver.options import SweepOptions
from tune.driver.workers import (LAUNCHER_CPU, check_batch_split, check_node_gpus, launcher_resources, max_concurrent,
                                 worker_resources)
from tune.errors import SweepInputError
from tune.results.trial_config import config_workers, trial_gpus


def node(name: str, cpus: float, gpus: float = 0.0, alive: bool = True) -> dict:
    """A ``ray.nodes()`` entry."""
    resources = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
    return {"NodeID": f"{name}-0123456789", "NodeManagerHostname": name, "Alive": alive, "Resources": resources}


def test_two_gpus_per_trial_is_two_workers_of_one_gpu():
    """Bug caught (issue 20): --gpus-per-trial 2 reserving two GPUs for one process that trains on the first
    and leaves the second idle; or the shorthand not applied, so the launcher's Tune request holds the GPUs
    that the Train workers then wait for."""
    options = SweepOptions(gpus_per_trial=2.0, cpus_per_trial=3.0)
    assert (options.workers, options.gpus_per_worker, options.trial_gpus) == (2, 1.0, 2.0)
    assert worker_resources(options) == {"CPU": 3.0, "GPU": 1.0}
    assert launcher_resources(options) == {"cpu": LAUNCHER_CPU, "gpu": 0.0}
    # --workers-per-trial: the flags are per worker
    options = SweepOptions(workers_per_trial=3, gpus_per_trial=1.0, cpus_per_trial=2.0)
    assert (options.workers, options.gpus_per_worker, options.trial_gpus) == (3, 1.0, 3.0)
    assert worker_resources(options) == {"CPU": 2.0, "GPU": 1.0}
    cpu = SweepOptions(workers_per_trial=2, cpus_per_trial=1.0)
    assert (cpu.workers, cpu.trial_gpus, worker_resources(cpu)) == (2, 0.0, {"CPU": 1.0})


def test_one_worker_keeps_the_trials_own_request():
    """Bug caught: a one-worker trial sent down the launcher path, or asking Tune for the launcher's 0.01 CPU
    (it trains in the Tune actor, so Tune must reserve its CPUs and its GPU share)."""
    options = SweepOptions(gpus_per_trial=0.5, cpus_per_trial=4.0)
    assert (options.workers, options.gpus_per_worker, options.trial_gpus) == (1, 0.5, 0.5)
    assert launcher_resources(options) == {"cpu": 4.0, "gpu": 0.5}
    assert max_concurrent(options.replace(max_concurrent=5), [node("a", 64, 8)]) == 5


PER_WORKER = "--gpus-per-trial must satisfy 0 or 1 with --workers-per-trial > 1"


@pytest.mark.parametrize("flags, named", [
    ({"workers_per_trial": 0}, "--workers-per-trial must satisfy >= 1"),
    ({"workers_per_trial": 2, "gpus_per_trial": 0.5}, PER_WORKER),
    ({"workers_per_trial": 2, "gpus_per_trial": 2.0}, PER_WORKER),
])
def test_bad_worker_flags_name_the_flag_and_the_rule(flags, named):
    """Bug caught: a fractional GPU per worker accepted (two ranks on one GPU: NCCL refuses it mid-run) or
    zero workers reaching Ray Train."""
    with pytest.raises(SweepInputError, match=named):
        SweepOptions(**flags)


def test_the_global_batch_must_split_into_whole_classes_per_rank():
    """Bug caught: batch_size 16 over 8 ranks at 4 samples per class (2 rows per rank: half a class) accepted;
    the rule applied to label-free objectives, which need only equal shares."""
    check_batch_split([16], [4], ["supervised"], 2)  # 8 rows = 2 classes per rank
    check_batch_split([16], [4], ["instance"], 8)  # 2 rows per rank: no classes to keep whole
    with pytest.raises(SweepInputError) as caught:
        check_batch_split([16, 32], [4], ["supervised"], 8)
    text = str(caught.value)
    # 16 / 8 = 2 rows per rank, not a multiple of 4; the nearest batch that splits: 1 x 8 x 4 = 32
    assert "--workers-per-trial 8" in text and "a multiple of 8 x samples_per_class=4" in text
    assert "batch_size=16 (2 rows per rank)" in text and "use batch_size=32" in text
    with pytest.raises(SweepInputError, match="a multiple of 3, one share per rank"):
        check_batch_split([16], [4], ["moco"], 3)


def test_sampler_random_needs_only_equal_shares_per_rank():
    """Bug caught: the check before Ray refusing a random-sampler batch for splitting classes it never keeps
    whole (16 rows over 8 ranks at 4 samples per class), or a space sweeping the sampler checked for one value."""
    check_batch_split([16], [4], ["supervised"], 8, samplers=["random"])   # 2 shuffled rows per rank
    with pytest.raises(SweepInputError, match="samples_per_class=4"):
        check_batch_split([16], [4], ["supervised"], 8, samplers=["random", "m_per_class"])
    with pytest.raises(SweepInputError, match="a multiple of 3, one share per rank"):
        check_batch_split([16], [4], ["supervised"], 3, samplers=["random"])


def test_label_free_objectives_split_by_the_configs_own_rule():
    """Bug caught (the flags' copy of the rule had drifted from the config's): a neighbours batch with no whole
    tuples per rank, or MoCo sub-batches that do not share out over the ranks, passed the check before Ray
    and failed in every trial."""
    check_batch_split([32], [4], ["neighbours"], 2, neighbours_k=[3])   # 16 rows per rank: 4 tuples of 4
    with pytest.raises(SweepInputError) as caught:
        check_batch_split([32], [4], ["neighbours"], 2, neighbours_k=[4])   # 16 rows per rank, tuples of 5
    text = str(caught.value)
    assert "a multiple of 2 x neighbours.k + 1 = 5, so that each rank draws whole tuples" in text
    assert "batch_size=32 (16 rows per rank)" in text and "use batch_size=30" in text
    check_batch_split([32], [4], ["moco"], 2, bn_splits=[4])
    with pytest.raises(SweepInputError, match=r"--workers-per-trial 2 needs moco.bn_splits to be a multiple of "
                                              r"workers=2 .* but got moco.bn_splits=3"):
        check_batch_split([32], [4], ["moco"], 2, bn_splits=[3])


def test_a_space_is_checked_for_every_neighbours_k_it_can_give():
    """Bug caught: the check before Ray read batch_size, samples_per_class and the objective, never the swept
    neighbours.k: the shipped neighbours space at batch_size 40 over 2 ranks (20 rows each) runs k = 7 (tuples
    of 8), which every such trial refused."""
    from tune.driver.workers import check_space
    from tune.search.spaces import load_space

    check_space(load_space("neighbours"), SweepOptions(workers_per_trial=2))   # 32 rows per rank: 2, 4, 8 divide
    with pytest.raises(SweepInputError, match=r"neighbours.k \+ 1 = 8"):
        check_space(load_space("neighbours", overrides={"batch_size": 40}), SweepOptions(workers_per_trial=2))


def test_the_checked_space_carries_the_flags_workers_to_every_trial():
    """Bug caught: ``--workers-per-trial 2`` checked but not pinned, so each trial's TrainConfig says one worker
    (``config.workers`` 1: every rank trains the whole batch alone, and gpu_hours bills one GPU); or one worker
    pinned, which a space without the key must not gain."""
    from tune.driver.workers import check_space
    from tune.results.trial_config import WORKERS_KEY
    from tune.search.spaces import load_space

    assert check_space(load_space("quickstart"), SweepOptions(workers_per_trial=2)).base[WORKERS_KEY] == 2
    assert WORKERS_KEY not in check_space(load_space("quickstart"), SweepOptions()).base


def test_device_cpu_on_gpu_workers_is_refused_before_ray_starts():
    """Bug caught: ``--gpus-per-trial 1 --workers-per-trial 2`` with ``device=cpu`` in the space started NCCL
    workers that trained on the CPU, and the first gather of CPU tensors failed inside every trial."""
    from tune.driver.workers import check_space
    from tune.search.spaces import load_space

    space = load_space("quickstart", overrides={"device": "cpu"})
    options = SweepOptions(workers_per_trial=2, gpus_per_trial=1.0)
    with pytest.raises(SweepInputError, match="device=cpu cannot run a data-parallel trial on GPUs.*NCCL"):
        check_space(space, options)
    check_space(space, SweepOptions(workers_per_trial=2, gpus_per_trial=0.0))   # gloo on CPU workers
    check_space(load_space("quickstart"), options)   # device=auto


def test_a_trial_with_more_gpus_than_any_node_is_refused_naming_the_nodes():
    """Bug caught: a 4-GPU trial on 2-GPU nodes accepted (its Train run waits for resources forever), or the
    error not saying which nodes have how many GPUs."""
    nodes = [node("head", 8), node("gpu-a", 16, 2), node("gpu-b", 16, 1), node("gone", 16, 8, alive=False)]
    check_node_gpus(SweepOptions(gpus_per_trial=2.0), nodes)  # gpu-a has 2
    check_node_gpus(SweepOptions(workers_per_trial=4), nodes)  # CPU workers: no GPU needed
    with pytest.raises(SweepInputError) as caught:
        check_node_gpus(SweepOptions(workers_per_trial=4, gpus_per_trial=1.0), nodes)
    text = str(caught.value)
    assert "--workers-per-trial 4 x --gpus-per-trial 1 asks 4 GPUs per trial" in text
    assert "head (head-012): 0, gpu-a (gpu-a-01): 2, gpu-b (gpu-b-01): 1" in text and "gone" not in text
    with pytest.raises(SweepInputError, match="--gpus-per-trial 3 asks 3 GPUs per trial"):
        check_node_gpus(SweepOptions(gpus_per_trial=3.0), nodes)
    with pytest.raises(SweepInputError, match="no GPU node|GPUs per node: head"):
        check_node_gpus(SweepOptions(gpus_per_trial=1.0), [node("head", 8)])


def test_trials_at_once_are_those_whose_workers_fit_together():
    """Bug caught: Tune, which reserves only each launcher's bundle, starting every trial at once: their
    Train runs then wait on each other's workers (Ray's guide: cap max_concurrent_trials)."""
    cpu = SweepOptions(workers_per_trial=2, cpus_per_trial=1.0)
    assert max_concurrent(cpu, [node("a", 8.5)]) == 4  # 8 one-CPU workers = 4 trials of 2, + 4 x 0.01 CPU
    assert max_concurrent(cpu, [node("a", 8)]) == 3  # the launchers' 0.01 CPU each: 4 x 2.01 > 8
    assert max_concurrent(cpu.replace(max_concurrent=3), [node("a", 8)]) == 3
    assert max_concurrent(cpu, [node("a", 1)]) == 1  # never 0 on a joined cluster: an autoscaler may add nodes
    # Bug caught: on the sweep's own local Ray, a trial that can never fit (2 one-CPU workers + the launcher's
    # 0.01 on 2 CPUs, the docs' CPU example on a laptop) waited forever without a word
    with pytest.raises(SweepInputError, match=r"--workers-per-trial 2 x \(1 CPU\) per worker.*never fit on this Ray "
                                              r"\(2 CPUs\).*at most 0.99 for 2 workers"):
        max_concurrent(cpu, [node("a", 2)], own_ray=True)
    gpu = SweepOptions(gpus_per_trial=2.0, cpus_per_trial=2.0)  # 2 workers x (2 CPUs, 1 GPU)
    # node a: min(16 / 2, 2 / 1) = 2 workers; node b: min(3 // 2, 4) = 1 worker; 3 workers = 1 trial
    assert max_concurrent(gpu, [node("a", 16, 2), node("b", 3, 4), node("c", 8, 8, alive=False)]) == 1
    assert max_concurrent(gpu, [node("a", 16, 4), node("b", 16, 4)]) == 4  # 4 x (2 x 2 + 0.01) <= 32 CPUs


def test_a_trials_gpus_are_its_workers_gpus():
    """Bug caught (issue 20): gpu_hours billing a multi-worker trial by its Tune placement group, which holds
    only the launcher (0 GPUs), or billing every trial by the flag instead of its own workers."""
    launcher = SimpleNamespace(required_resources={"CPU": 0.01})
    two = SimpleNamespace(config={"workers": 2}, placement_group_factory=launcher)
    one = SimpleNamespace(config={}, placement_group_factory=SimpleNamespace(required_resources={"GPU": 0.5}))
    assert trial_gpus(two, 1.0) == 2.0 and trial_gpus(one, 0.5) == 0.5
    assert trial_gpus(one) == 0.5  # an object pickled without gpus_per_worker: the placement group's
    assert config_workers({"workers": None}) == 1 and config_workers({"workers": 3}) == 3


@pytest.mark.slow
def test_the_node_check_reads_the_connected_rays_gpus():
    """Bug caught: the GPU check run before Ray is connected (no nodes: every GPU sweep refused) or on nodes'
    entries in another shape than ``ray.nodes()`` gives. One local Ray with 2 fake GPUs and 8 logical CPUs."""
    import ray

    from tune.driver.sweep import resolved_resources

    ray.init(address="local", num_cpus=8, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        options = resolved_resources(SweepOptions(gpus_per_trial=2.0))
        # auto: 8 x 1 / 2 less the launcher's 0.01, rounded down (4 each and the launcher never fit in 8)
        assert (options.workers, options.cpus_per_trial, options.max_concurrent) == (2, 3.0, 1)
        with pytest.raises(SweepInputError, match=r"asks 3 GPUs per trial.*GPUs per node: .*: 2"):
            resolved_resources(SweepOptions(gpus_per_trial=3.0))
    finally:
        ray.shutdown()
