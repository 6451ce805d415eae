"""A trial's resources (tune.trial.resources): CPUs that follow the GPUs, the CUDA memory cap, the OOM reason."""
import os

import pytest
import torch

from tune.driver.options import SweepOptions, cpus_option
from tune.errors import SweepInputError
from tune.trial.resources import (ALLOC_CONF, ALLOC_CONF_ANY_DEVICE, EXPANDABLE, cap_gpu_memory, out_of_memory_reason,
                                  resolve_cpus_per_trial)


def _node(cpus, gpus=0, alive=True):
    return {"Alive": alive, "Resources": {"CPU": cpus, **({"GPU": gpus} if gpus else {})}}


def test_auto_gives_the_cpus_that_come_with_a_share_of_a_gpu_node():
    """Bug caught: auto left at 1 CPU for GPU trials (no loader worker: a starving GPU), computed from the
    whole cluster's CPUs (a CPU-only head node counted), or rounded up past what a node holds."""
    nodes = [_node(8), _node(16, 8), _node(32, 4)]
    assert resolve_cpus_per_trial("auto", 0.0, nodes) == 1.0  # no GPUs asked: 1
    assert resolve_cpus_per_trial("auto", 0.5, nodes) == 1.0  # 16 x 0.5 / 8 = 1 on the tighter node
    assert resolve_cpus_per_trial("auto", 1.0, [_node(16, 8)]) == 2.0
    assert resolve_cpus_per_trial("auto", 0.25, [_node(16, 1)]) == 4.0
    assert resolve_cpus_per_trial("auto", 1.0, [_node(10, 4)]) == 2.0  # 2.5 rounded down
    assert resolve_cpus_per_trial("auto", 0.1, [_node(4, 2)]) == 1.0  # never below 1
    assert resolve_cpus_per_trial("auto", 1.0, [_node(64, 8, alive=False), _node(16, 2)]) == 8.0  # dead nodes
    assert resolve_cpus_per_trial(3.0, 1.0, nodes) == 3.0  # a number stays
    # Bug caught: multi-worker trials given the node's every CPU, with nothing left for their launchers: 2 workers
    # of 4 CPUs + a 0.01-CPU launcher on an 8-CPU node never fit, and the trial waited forever
    assert resolve_cpus_per_trial("auto", 1.0, [_node(8, 2)], workers=2, launcher_cpu=0.01) == 3.0
    assert resolve_cpus_per_trial("auto", 1.0, [_node(64, 8)], workers=2, launcher_cpu=0.01) == 7.0  # 4 launchers
    assert resolve_cpus_per_trial("auto", 1.0, [_node(10, 4)], workers=2, launcher_cpu=0.01) == 2.0  # room left


def test_cpus_per_trial_accepts_auto_or_a_positive_number():
    """Bug caught: --cpus-per-trial auto rejected by the CLI's float parser, or a bad word accepted."""
    assert SweepOptions().cpus_per_trial == "auto"
    assert SweepOptions(cpus_per_trial=cpus_option("2")).cpus_per_trial == 2.0
    for bad in ("many", 0.0, -1.0):
        with pytest.raises(SweepInputError, match="--cpus-per-trial"):
            SweepOptions(cpus_per_trial=cpus_option(bad) if isinstance(bad, str) else bad)
    with pytest.raises(SweepInputError, match="--checkpoint-period"):
        SweepOptions(checkpoint_period=-1)


def test_a_trial_sharing_a_gpu_caps_its_allocator_at_its_share(monkeypatch):
    """Bug caught: trials sharing a GPU growing until one runs out of memory (no cap), the cap set for whole
    GPUs too, or the user's own PYTORCH_CUDA_ALLOC_CONF overwritten, or their PYTORCH_ALLOC_CONF (torch's newer
    name) masked by a PYTORCH_CUDA_ALLOC_CONF we set, which the allocator reads first."""
    caps = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: type("P", (), {"total_memory": 80 * 2**30}))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, *a: caps.append(round(f * 80, 6)))
    monkeypatch.delenv(ALLOC_CONF, raising=False)
    monkeypatch.setenv(ALLOC_CONF_ANY_DEVICE, "garbage_collection_threshold:0.6")
    # caps in GiB of an 80 GiB GPU: the share less the 1 GiB each process holds outside its allocator
    assert cap_gpu_memory(0.25) and caps == [19.0] and ALLOC_CONF not in os.environ
    monkeypatch.delenv(ALLOC_CONF_ANY_DEVICE)
    caps.clear()
    assert cap_gpu_memory(0.25) and caps == [19.0]
    assert os.environ[ALLOC_CONF] == EXPANDABLE
    assert not cap_gpu_memory(1.0) and not cap_gpu_memory(0.0) and caps == [19.0]
    monkeypatch.setenv(ALLOC_CONF, "max_split_size_mb:128")
    assert cap_gpu_memory(0.5) and os.environ[ALLOC_CONF] == "max_split_size_mb:128" and caps == [19.0, 39.0]


def test_the_caps_of_the_trials_filling_a_gpu_leave_room_for_their_processes():
    """Bug caught: caps of share x total summing to the whole GPU, while each process also holds its CUDA
    context and library handles outside the allocator: trials sharing the GPU ran out of physical memory below
    their caps, and the failure was put down to their batch size (not retried)."""
    from tune.trial.resources import OUTSIDE_ALLOCATOR, allocator_cap

    for total in (16 * 2**30, 80 * 2**30, 141 * 2**30):
        for trials in (2, 3, 4):
            assert trials * (allocator_cap(1 / trials, total) * total + OUTSIDE_ALLOCATOR) <= total
    assert allocator_cap(0.5, 2**30) == 0.25  # a tiny GPU: half the share, not nothing


def test_the_out_of_memory_reason_says_what_to_change():
    """Bug caught: a bare 'CUDA out of memory' that names neither the batch size nor what to do."""
    text = out_of_memory_reason(128, 0.5)
    assert "batch_size=128" in text and "--gpus-per-trial" in text and "peak" in text and "cap" in text


def test_a_reused_actor_frees_the_previous_trials_trainer_and_collects_only_then(monkeypatch):
    """Bugs caught: with reuse_actors a trial runs in the process of the last one, whose Trainer sat in a
    reference cycle that only the oldest-generation collection frees: its model, optimiser and memory kept GPU
    memory under the new trial's cap, and its loader workers stayed alive. And a full collection at every
    trial's start (0.3 s of set-up each on the sweep benchmark) when the previous trainer is already gone."""
    import gc
    import weakref

    from tests.xbm.conftest import tiny_trainer
    from tune.trial import resources
    def trial():
        trainer = tiny_trainer(epochs=1)
        resources.track_trainer(trainer)
        next(trainer.fit())
        cycle = {"trainer": trainer}
        cycle["self"] = cycle   # as the frames torch's lazy imports keep (measured: the first trainer of a process)
        return weakref.ref(trainer)

    collections = []
    real_collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(a) or real_collect(*a))
    gc.disable()
    try:
        previous = trial()
        assert previous() is not None   # nothing but the cyclic collector frees it
        resources.free_previous_trial()
        assert previous() is None and len(collections) == 1
        resources.free_previous_trial()   # nothing left to free: no collection
        assert len(collections) == 1
    finally:
        gc.enable()


def test_a_ranks_out_of_memory_is_described_by_the_rank_not_the_launcher(monkeypatch):
    """Bug caught: a data-parallel rank's out-of-memory error described in its launcher, which holds no GPU:
    'peak 0.00 GiB' (the launcher's own allocator), and a CUDA context opened there on a GPU another trial
    owns. The rank measures; the launcher only carries the reason (it survives Ray's pickling)."""
    import pickle

    import torch

    from tune.results.trial_config import train_config
    from tune.trial import data_parallel
    from tune.trial.base import deterministic_failure
    from tune.trial.resources import RankOutOfMemoryError

    def out_of_memory(job):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(data_parallel, "_run_rank", out_of_memory)
    with pytest.raises(RankOutOfMemoryError) as raised:
        data_parallel.worker_main({"config": {"dataset": "toy", "model": "mlp", "batch_size": 96}})
    error = pickle.loads(pickle.dumps(raised.value))  # as Ray hands it to the launcher
    assert "batch_size=96" in error.reason and str(error) == "CUDA out of memory. Tried to allocate 2.00 GiB"

    def no_cuda_here(*args):
        raise AssertionError("the launcher touched CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", no_cuda_here)
    cfg = train_config({"dataset": "toy", "model": "mlp", "batch_size": 96})
    assert deterministic_failure(error, cfg, 3, 0.0) == (4, error.reason)


@pytest.mark.slow
def test_a_reused_actor_stops_the_previous_trainer_s_workers_before_collecting_it(monkeypatch):
    """Bug caught: ``free_previous_trial`` collected the previous trial's trainer with its loader workers
    alive; the collection finalised their queues first, so torch waited out its 5-s join timeout for each
    worker inside the new trial's set-up (75 s for a GPU trial's 15 workers)."""
    from tests.xbm.conftest import tiny_trainer
    from tests.xbm.training.test_loaders import record_join_timeouts
    from tune.trial import resources

    def trial():
        trainer = tiny_trainer(dataset="digits", model="test_resnet", image_size=16, batch_size=20, epochs=1,
                               warmup_epochs=0, embedding_size=16, num_workers="2")
        resources.track_trainer(trainer)
        next(trainer.fit())
        cycle = {"trainer": trainer}
        cycle["self"] = cycle
        return list(trainer.loader._iterator._workers)

    workers = trial()
    timed_out = record_join_timeouts(monkeypatch)
    resources.free_previous_trial()
    assert [w.exitcode for w in workers] == [0, 0] and timed_out == [False, False]
