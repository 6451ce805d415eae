"""The evaluation embedder's persistent loaders (xbm.training.loaders.Embedder)."""
import weakref

import pytest
import torch

import xbm.training.loaders as loaders
from xbm.data.base import SampleDataset, Transforms
from xbm.data.sources import VectorSource
from xbm.runtime.device import Runtime
from xbm.training.loaders import EVAL_LOADERS_KEPT, Embedder


def _dataset(n=40):
    import numpy as np

    source = VectorSource(torch.arange(n * 3, dtype=torch.float32).reshape(n, 3))
    return SampleDataset(source, np.arange(n), np.arange(n) % 4, Transforms(3), "eval")


def test_a_dataset_is_given_one_loader_for_the_whole_run(monkeypatch):
    """Bug caught: a new DataLoader (worker start, data set pickled to every worker) at every evaluation of
    every epoch; or a subset's loader served for the whole set (wrong rows embedded)."""
    built = []
    real = loaders.DataLoader
    monkeypatch.setattr(loaders, "DataLoader", lambda *a, **k: built.append(a[0]) or real(*a, **k))
    embed = Embedder(Runtime.from_config("cpu", "off", False), 0)
    model = torch.nn.Identity()
    data, probe = _dataset(), torch.tensor([3, 1, 7])
    first, _ = embed(model, data)
    again, _ = embed(model, data)
    subset, labels = embed(model, data, probe)
    embed(model, data, probe)
    assert len(built) == 2 and torch.equal(first, again)
    assert torch.equal(subset, first[probe]) and labels.tolist() == [3, 1, 3]


def test_changing_subsets_recycle_the_oldest_loader():
    """Bug caught: staleness probes (new rows every epoch) piling up loaders for the whole run."""
    embed = Embedder(Runtime.from_config("cpu", "off", False), 0)
    data = _dataset()
    for start in range(EVAL_LOADERS_KEPT + 5):
        embed(torch.nn.Identity(), data, torch.tensor([start]))
    assert len(embed._loaders) == EVAL_LOADERS_KEPT


def test_a_probe_embedded_once_keeps_nothing_and_a_kept_set_lets_its_loader_go(monkeypatch):
    """Bugs caught: staleness probes (other rows every epoch, never read again) storing their inputs and
    taking kept-loader slots, up to 300 MiB of the inputs' budget; and a set whose inputs are kept holding its
    loader, whose persistent workers then idled for the rest of the run (7 processes per large split)."""
    embed = Embedder(Runtime.from_config("cpu", "off", False), 0)
    data, model = _dataset(), torch.nn.Identity()
    whole, _ = embed(model, data)
    (entry,) = embed._loaders.values()
    assert entry[1] is None and entry[2] is not None   # read from memory from now on, no loader left
    kept = embed._inputs_bytes
    for start in range(3):
        probe, _ = embed(model, data, torch.tensor([start, start + 5]), keep=False)
        assert torch.equal(probe, whole[[start, start + 5]])
    assert len(embed._loaders) == 1 and embed._inputs_bytes == kept
    assert torch.equal(embed(model, data)[0], whole)


class CountingDataset(torch.utils.data.Dataset):
    """An evaluation view that counts its reads (each one a decode and transform of an image set)."""

    def __init__(self, n=40):
        self.inner, self.reads = _dataset(n), 0

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        self.reads += 1
        return self.inner[i]


def test_a_sets_inputs_are_read_once_and_embedded_again_from_memory():
    """Bug caught: every evaluation of every epoch decoding and transforming its images again (on a GPU the
    main process decodes a small split while the device waits); or kept inputs served for another subset."""
    embed = Embedder(Runtime.from_config("cpu", "off", False), 0, batch_size=16)
    data, probe = CountingDataset(), torch.tensor([5, 2, 9])
    model = torch.nn.Linear(3, 2)
    first, labels = embed(model, data)
    second, again = embed(model, data)
    assert data.reads == 40 and torch.equal(first, second) and torch.equal(labels, again)
    subset, _ = embed(model, data, probe)
    assert data.reads == 43 and torch.equal(subset, first[probe])
    assert embed._inputs_bytes == 43 * (3 * 4 + 8)   # float32 rows of 3 and int64 labels


def test_each_pass_goes_through_the_progress_hook_read_or_kept_and_embeds_the_same(monkeypatch):
    """Bug caught (issue 55): an evaluation's embedding without a progress bar however long it takes, or the
    hook given only the loader's first pass (the kept batches of later epochs bypassing it), or a wrapped pass
    embedding other rows than the bare one."""
    passes = []

    def progress(batches, desc):
        passes.append((desc, len(batches)))
        return iter(list(batches))

    data = CountingDataset()
    model = torch.nn.Linear(3, 2)
    bare, _ = Embedder(Runtime.from_config("cpu", "off", False), 0, batch_size=16)(model, data)
    embed = Embedder(Runtime.from_config("cpu", "off", False), 0, batch_size=16, progress=progress)
    first, labels = embed(model, data)            # read by its loader
    second, _ = embed(model, data)                # from the kept batches
    probe, _ = embed(model, data, torch.tensor([1, 2]), keep=False)
    assert passes == [("embedding", 3), ("embedding", 3), ("embedding", 1)]
    assert torch.equal(first, bare) and torch.equal(second, bare) and torch.equal(probe, bare[1:3])


def test_inputs_over_the_budget_are_read_again_and_evicted_loaders_give_their_bytes_back(monkeypatch):
    """Bugs caught: kept inputs growing without bound (the host's memory), and bytes still counted for the
    inputs of an evicted loader, so that after a few staleness probes nothing is kept any more."""
    monkeypatch.setattr(loaders, "EVAL_INPUTS_BYTES", 30 * (3 * 4 + 8))
    embed = Embedder(Runtime.from_config("cpu", "off", False), 0)
    data = CountingDataset()
    embed(torch.nn.Identity(), data)
    embed(torch.nn.Identity(), data)
    assert data.reads == 80 and embed._inputs_bytes == 0   # 40 rows: over the budget, read every time
    for start in range(EVAL_LOADERS_KEPT + 5):
        embed(torch.nn.Identity(), data, torch.tensor([start]))
    assert embed._inputs_bytes == EVAL_LOADERS_KEPT * (3 * 4 + 8)
    reads = data.reads
    embed(torch.nn.Identity(), data, torch.tensor([EVAL_LOADERS_KEPT + 4]))   # still kept
    assert data.reads == reads


def test_a_pass_over_the_budget_lets_go_of_its_batches_as_it_goes(monkeypatch):
    """Bug caught: every batch of a large set (SOP's 60k test images: 9 GB at 224 px) held until the end of
    each evaluation pass only to find that they do not fit the budget."""
    monkeypatch.setattr(loaders, "EVAL_INPUTS_BYTES", 8 * (3 * 4 + 8))   # one batch of 8
    alive = []

    class Watch(torch.nn.Linear):
        def forward(self, x):
            alive.append(sum(ref() is not None for ref in seen))
            seen.append(weakref.ref(x))
            return super().forward(x)

    seen: list = []
    Embedder(Runtime.from_config("cpu", "off", False), 0, batch_size=8)(Watch(3, 2), CountingDataset())
    assert len(alive) == 5 and max(alive) <= 1, alive   # was [0, 1, 2, 3, 4]


def test_pinned_batches_count_the_power_of_two_blocks_the_host_allocator_gives_them(monkeypatch):
    """Bug caught: a CUDA run's kept inputs are pinned, and torch's caching host allocator rounds each pinned
    block up to a power of two, so a budget counted in ``nbytes`` (38.5 MB per 256-image batch at 224 px)
    held about 1.7x its size in page-locked memory (64 MiB per batch). No CUDA here: pinning is simulated."""
    batch = torch.zeros(256, 3, 224, 224, dtype=torch.uint8)
    assert loaders.host_bytes(batch) == batch.nbytes == 38_535_168
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self, *args: True)
    assert loaders.host_bytes(batch) == 64 * 2**20
    assert loaders.host_bytes(torch.zeros(8, dtype=torch.uint8)) == 8   # a power of two already
    assert loaders.host_bytes(torch.zeros(0)) == 0
    embed = Embedder(Runtime.from_config("cpu", "off", False), 0, batch_size=16)
    embed(torch.nn.Linear(3, 2), CountingDataset())   # batches of 16, 16, 8 rows: 3 float32s and a label
    assert embed._inputs_bytes == 2 * (256 + 128) + (128 + 64)   # 192 -> 256, 128, 96 -> 128, 64 bytes


def test_embedding_gives_every_module_its_own_mode_back():
    """Bug caught: the Embedder restored only the top module's mode (``model.train(True)``), waking a backbone
    the warm-up had frozen in eval mode: its BatchNorm statistics moved during the "frozen" warm-up, and with
    the neighbours objective (rank 0 alone embeds the training set then) and sync_bn, rank 0 alone
    all-reduced BatchNorm statistics while the other ranks waited elsewhere: a hang."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    model.train()
    model[1].eval()   # the frozen backbone
    Embedder(Runtime.from_config("cpu", "off", False), 0, batch_size=16)(model, CountingDataset())
    assert [m.training for m in model] == [True, False, True] and model.training


def _shm(monkeypatch, size):
    monkeypatch.setattr(loaders.os, "statvfs", lambda folder: type("S", (), {"f_blocks": size // 4096, "f_frsize": 4096}))


def test_loader_workers_that_cannot_fit_docker_s_64_mb_of_shared_memory_are_refused_with_what_to_change(monkeypatch):
    """Bug caught: torch's loader workers build every batch in /dev/shm, and a container's default 64 MB cannot
    hold 7 workers x 4 batches of 64 images at 224 px (257 MiB): every image run failed in its first batches
    with "unable to allocate shared memory", and Tune retried it into the same failure."""
    _shm(monkeypatch, 64 * 2**20)
    sample = 3 * 224 * 224
    with pytest.raises(loaders.SharedMemoryError, match=r"7 workers x 4 batches x 64 images.*need 257 MiB.*64 MiB"
                                                        r".*--shm-size.*num_workers \(at most 1 fit\)"):
        loaders.check_shared_memory(sample, 7, [(64, 4, 1)])
    loaders.check_shared_memory(sample, 1, [(64, 4, 1)])   # 37 MiB fit
    loaders.check_shared_memory(sample, 0, [(64, 4, 1), (256, 2, 1)])   # no workers: nothing passes through it
    with pytest.raises(loaders.SharedMemoryError, match="x 2 batches x 256 images"):   # the larger loader counts
        loaders.check_shared_memory(sample, 1, [(64, 4, 1), (256, 2, 1)])
    _shm(monkeypatch, 8 * 2**30)
    loaders.check_shared_memory(sample, 7, [(64, 4, 1), (256, 2, 1)])


def test_a_pass_drawn_ahead_counts_its_batches_with_the_evaluation_loader_s(monkeypatch):
    """Bug caught: a training pass drawn ahead (prefetch_next_epoch) holds its workers' batches in /dev/shm
    while the evaluation loader's workers fill theirs, but only the larger of the two was checked: a run that
    fit either loader alone failed in its first evaluation."""
    _shm(monkeypatch, 100 * 2**20)
    sample = 3 * 224 * 224   # per worker: 64 x 4 x 147 KiB = 36.75 MiB, 256 x 2 x 147 KiB = 73.5 MiB
    loaders.check_shared_memory(sample, 1, [(64, 4, 1), (256, 2, 1)])
    with pytest.raises(loaders.SharedMemoryError, match=r"1 workers x 4 batches x 64 images \+ 1 workers x 2 "
                                                        r"batches x 256 images.*need 110 MiB.*prefetch_next_epoch"):
        loaders.check_shared_memory(sample, 1, [(64, 4, 1), (256, 2, 1)], at_once=True)


def test_the_ranks_of_a_node_are_counted_together_against_its_shared_memory(monkeypatch):
    """Bug caught: each data-parallel rank checked its own loader workers against the whole /dev/shm, which
    the node's ranks share: 4 ranks needing 4 x 37 MiB passed a 64 MiB check and failed in their first batches.
    The ranks on the node come from LOCAL_WORLD_SIZE (torchrun, Ray Train)."""
    from xbm.training.distributed import Ranks

    _shm(monkeypatch, 64 * 2**20)
    sample = 3 * 224 * 224
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert Ranks(1, 4).on_this_node == 4 and Ranks().on_this_node == 1
    loaders.check_shared_memory(sample, 1, [(64, 4, 1)])
    with pytest.raises(loaders.SharedMemoryError, match=r"4 ranks x 1 workers x 4 batches.*need 147 MiB"):
        loaders.check_shared_memory(sample, 1, [(64, 4, Ranks(1, 4).on_this_node)])


@pytest.mark.slow
def test_a_resumed_run_with_persistent_workers_draws_what_the_uninterrupted_one_draws():
    """Bug caught: a resumed run creating its persistent loader's first iterator after restoring the RNG, so
    that one extra draw from torch's RNG moved everything after it (MoCo's key shuffle on an image model
    trained with loader workers: the resumed epoch's loss differed from the uninterrupted run's)."""
    import io

    from tests.xbm.conftest import tiny_config
    from xbm.trainer import Trainer

    values = dict(dataset="digits", model="test_resnet", image_size=16, batch_size=20, epochs=2, warmup_epochs=0,
                  embedding_size=16, objective="moco", num_workers="1")
    full = list(Trainer(tiny_config(**values)).fit())
    first = Trainer(tiny_config(**values))
    next(first.fit())
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    resumed = Trainer(tiny_config(**values))
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    again = list(resumed.fit())
    assert [r["epoch"] for r in again] == [2] and again[0]["loss"] == full[1]["loss"]


def test_a_subset_s_loader_sends_its_workers_a_handle_to_the_indices():
    """Bug caught: ``Subset(dataset, indices.tolist())`` pickled the subset's indices as a list into every spawned
    worker (bounded by the probe size today, by nothing in Embedder's interface)."""
    from multiprocessing.reduction import ForkingPickler

    data = _dataset(n=300_000)
    indices = torch.arange(0, 300_000, 2)
    loader = Embedder(Runtime.from_config("cpu", "off", False), 0)._loader(data, indices)
    assert len(ForkingPickler.dumps(loader.dataset)) < 8192
    x, label, i = loader.dataset[1]
    assert torch.equal(x, data[2][0]) and (label, i) == (data[2][1], 2)


def record_join_timeouts(monkeypatch) -> list[bool]:
    """For every ``Process.join`` from now on: whether the process was still alive after it (the join timed
    out, and torch then terminates the worker)."""
    from multiprocessing.process import BaseProcess

    timed_out, join = [], BaseProcess.join

    def recorded(process, timeout=None):
        join(process, timeout)
        timed_out.append(process.is_alive())

    monkeypatch.setattr(BaseProcess, "join", recorded)
    return timed_out


def two_worker_trainer(**values):
    """A 2-epoch trainer on digits with 2 loader workers (a pass is drawn ahead after epoch 1)."""
    from tests.xbm.conftest import tiny_config
    from xbm.trainer import Trainer

    return Trainer(tiny_config(dataset="digits", model="test_resnet", image_size=16, batch_size=20, epochs=2,
                               warmup_epochs=0, embedding_size=16, num_workers="2", **values))


@pytest.mark.slow
def test_a_closed_trainer_s_workers_end_on_their_own_at_once(monkeypatch):
    """Bug caught: a trainer's loader workers left to the cyclic garbage collector (a trainer sits in reference
    cycles), which finalises the workers' queues before the iterator that would tell them to end: torch waited
    out its 5-s join timeout for each worker, 75 s for a GPU trial's 15. Here the workers of a pass drawn ahead
    (prefetch_next_epoch) are busy when the trainer closes."""
    trainer = two_worker_trainer()
    next(trainer.fit())
    assert trainer.ahead is not None
    workers = list(trainer.loader._iterator._workers)
    timed_out = record_join_timeouts(monkeypatch)
    trainer.close()
    assert [w.exitcode for w in workers] == [0, 0] and timed_out == [False, False]
    trainer.close()   # twice: nothing left to stop


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["supervised", "instance", "moco", "neighbours"])
def test_a_trainer_dropped_without_close_stops_its_workers_at_once_when_collected(monkeypatch, objective):
    """Bugs caught: a trainer dropped without ``close()`` (a notebook, most tests) left its workers to the cyclic
    collector, which finalised their queues first, so each worker waited out torch's 5-s join timeout: 10 s for
    these 2, and 60-120 s of the test suite's time inside whichever test happened to trigger the collection. And
    a finaliser that holds the trainer (through its loader's data set or sampler: each objective builds its
    own), so that it is never collected at all."""
    import gc

    trainer = two_worker_trainer(objective=objective)
    next(trainer.fit())
    workers = list(trainer.loader._iterator._workers)
    dropped = weakref.ref(trainer)
    timed_out = record_join_timeouts(monkeypatch)
    del trainer
    gc.collect()
    assert dropped() is None
    # every join on time (others than these 2 may be collected too: what earlier tests dropped)
    assert [w.exitcode for w in workers] == [0, 0] and len(timed_out) >= 2 and not any(timed_out)
