"""Host synchronisations of a training step: at most one per step (issue 18, "a step without host waits").

On the CPU nothing waits, so the reads are counted instead: every way Python reads a tensor's value
(``item``, ``float``, ``int``, ``bool``, ``tolist``, ``numpy``, ``__index__``) is patched to count its calls
while ``run_epoch`` runs a step (the loader's ``next`` excluded: collation is not the step). On a GPU each
of those would make the CPU wait for the device; ``set_sync_debug_mode`` checks the CUDA side."""
from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from xbm.normalisers.config import KINDS
from xbm.training import epoch as epoch_module
from xbm.training.epoch import Step, run_epoch

from ..conftest import needs_cuda, tiny_trainer

READS = ("item", "__float__", "__int__", "__bool__", "tolist", "numpy", "__index__")


class Counter:
    """Reads per step: ``steps[i]`` lists the reads of step i (by method name)."""

    def __init__(self) -> None:
        self.steps: list[list[str]] = []
        self.on = False

    def wrap(self, name, original):
        def counted(tensor, *args, **kwargs):
            if self.on:
                self.steps[-1].append(name)
            return original(tensor, *args, **kwargs)
        return counted


def _counted_loader(loader, counter):
    """The loader with counting paused inside ``next`` (building a batch is not the step)."""
    for batch in loader:
        counter.steps.append([])
        counter.on = True
        yield batch
        counter.on = False


def _main_step(trainer):
    """A main-phase step as on CUDA: the fused AdamW that ``main_optimizer`` builds there (it exists on the CPU
    too), so the finiteness flag is read one step late and the optimiser reads no step counter."""
    trainer.model.train()
    optimizer = torch.optim.AdamW(trainer.model.parameters(), lr=1e-3, fused=True)
    return Step(trainer.model, trainer.objective, trainer.criterion(0), optimizer, trainer.scaler,
                list(trainer.model.parameters()), trainer.cfg.clip_grad, trainer.prepare_train)


@pytest.mark.parametrize("kind", KINDS)
def test_a_step_reads_the_device_at_most_once_for_every_normaliser_kind(kind, monkeypatch):
    """Bugs caught (issue 18): ``loss.item()`` plus pair counts read with ``float()`` every step; the
    normalisers reading their scalar state (AXBN's gain, the call count) or checking label ranges with
    ``int()`` every step; PC-XBN/SC-XBN reading group sizes back; SupCon's ``.any()`` checks and PML's
    assertion; a second mining for the statistics; the optimiser reading its step count. The epoch's sums
    are read once, at its end, outside the steps."""
    trainer = tiny_trainer(**{"normaliser.kind": kind, "memory.ratio": 0.5})
    # A first epoch fills the memory so that every kind adapts in the counted one.
    run_epoch(_main_step(trainer), trainer.loader, trainer.runtime, epoch=1, epoch_index=0)
    counter = Counter()
    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, counter.wrap(name, getattr(torch.Tensor, name)))
    step = _main_step(trainer)
    result = run_epoch(step, _counted_loader(trainer.loader, counter), trainer.runtime, epoch=2, epoch_index=1)
    assert result.iterations == len(counter.steps) == 6 and trainer.xbm.last_stats["memory_fill"] == 1.0
    assert trainer.xbm.last_stats["adapted"] == (0.0 if kind == "none" else 1.0)
    # Step 1 reads nothing; every later step reads the previous step's finiteness flag, and only that.
    assert counter.steps == [[]] + [["__bool__"]] * 5
    assert result.pairs["memory_pos_pairs"] > result.pairs["batch_pos_pairs"] > 0


@needs_cuda
@pytest.mark.parametrize("kind", KINDS)
def test_twenty_adaptations_of_every_kind_never_synchronise_on_cuda(kind):
    """Bug caught: a normaliser that makes the CPU wait for the GPU (``int()``/``float()`` of a buffer,
    ``unique``, ``nonzero``, ``bincount``, a boolean mask, a blocking copy of the super-class map): CUDA's
    sync debug mode raises on each. Twenty calls as XBMLoss makes them (in place, into the memory), after a
    first call that moves the map and the running moments to the GPU."""
    from xbm.normalisers import NormaliserConfig, build_normaliser
    gen = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 40, (600,), generator=gen).cuda()
    memory = torch.randn(600, 16, generator=gen).cuda()
    batch, batch_labels = torch.randn(32, 16, generator=gen).cuda(), torch.arange(8).repeat_interleave(4).cuda()
    norm = build_normaliser(NormaliserConfig(kind=kind), superclass_of=torch.arange(40) % 6, num_labels=40).cuda()
    norm(memory, labels, batch, batch_labels, out=memory)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(20):
            norm(memory, labels, batch, batch_labels, epoch=step, out=memory)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(memory).all()


@needs_cuda
def test_twenty_enqueues_with_a_device_iteration_never_synchronise_on_cuda():
    """Bug caught: the memory writing XBMLoss's iteration counter (a 0-dim CUDA tensor) with ``index_fill_``,
    which reads the value back (``.item()``) on every step."""
    from xbm.memory import EmbeddingMemory
    memory = EmbeddingMemory(50, 8).cuda()
    iteration = torch.zeros((), dtype=torch.long, device="cuda")
    batch, labels = torch.randn(16, 8, device="cuda"), torch.arange(16, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(20):
            memory.enqueue(batch, labels, labels, iteration=iteration)
            iteration += 1
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert memory.iterations.max().item() == 19


# aten ops whose output size depends on the data (the host must read it back) or that read a value.
DATA_DEPENDENT = {"_local_scalar_dense", "nonzero", "nonzero_numpy", "masked_select", "_unique", "_unique2",
                  "unique_dim", "unique_consecutive", "bincount", "repeat_interleave"}


class DeviceReads(TorchDispatchMode):
    """Every aten op that would make the CPU wait for a GPU: reads of a value (``item``, ``bool``, ...) and ops
    with data-dependent output sizes, including indexing with a boolean mask (``nonzero`` inside)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in DATA_DEPENDENT:
            self.ops.append(name)
        elif name in ("index", "index_put", "index_put_", "_index_put_impl_") and any(
                t is not None and t.dtype == torch.bool for t in args[1]):
            self.ops.append(f"{name} with a boolean mask")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("weight", [0.0, 0.5])
@pytest.mark.parametrize("kind", KINDS)
def test_a_step_runs_no_data_dependent_op_but_the_one_check(kind, weight):
    """Bugs caught: pairs built as index tuples (PML's miner: ``torch.where``, boolean indexing; the self-pair
    removal; PML's AvgNonZeroReducer), ``torch.unique``/``bincount`` in the group kinds, or any other op whose
    output size the host must read: on a GPU each waits for the device. Seen at the level of aten ops
    (a dispatch mode), so the C++ calls count too; with and without the in-batch term. Six steps: five
    reads of the previous step's flag, then the epoch's end reads the last one."""
    trainer = tiny_trainer(**{"normaliser.kind": kind, "memory.ratio": 0.5, "memory.batch_loss_weight": weight})
    run_epoch(_main_step(trainer), trainer.loader, trainer.runtime, epoch=1, epoch_index=0)
    batches = list(trainer.loader)
    with DeviceReads() as reads:
        result = run_epoch(_main_step(trainer), batches, trainer.runtime, epoch=2, epoch_index=1)
    assert result.iterations == 6 and reads.ops == ["_local_scalar_dense"] * 6
    assert result.pairs["memory_pos_pairs"] > 0 and result.pairs["batch_neg_pairs"] > 0


@pytest.mark.parametrize("values", [{"loss.kind": "contrastive"}, {"loss.kind": "contrastive", "miner.kind": "none"},
                                    {"loss.kind": "ntxent"}, {"objective": "neighbours", "batch_size": 32},
                                    {"objective": "instance"}, {"objective": "moco"}],
                         ids=lambda v: ",".join(f"{k}={v[k]}" for k in v))
def test_the_losses_on_pair_masks_run_no_data_dependent_op_but_the_one_check(values):
    """Bug caught: a loss kind or label-free objective whose pair loss falls back to PML's index tuples
    (``supports_masks`` refusing it, e.g. for the ``MultipleReducers`` PML wraps around the contrastive loss's
    two sub-losses), so every step waits for the device about ten times; and MoCo's batch split into queries
    and keys by boolean indexing with its key mask (``enqueue_mask``): six waits per step."""
    trainer = tiny_trainer(**{"memory.ratio": 0.5, **values})
    trainer.objective.begin_epoch(0, trainer._embed_training_set, trainer.loader.sampler.sampler)  # neighbours' pool
    run_epoch(_main_step(trainer), trainer.loader, trainer.runtime, epoch=1, epoch_index=0)
    batches = list(trainer.loader)
    with DeviceReads() as reads:
        result = run_epoch(_main_step(trainer), batches, trainer.runtime, epoch=2, epoch_index=1)
    assert result.iterations == 6 and reads.ops == ["_local_scalar_dense"] * 6
    assert trainer.xbm.last_stats["memory_fill"] == 1.0


def test_the_detector_sees_pmls_index_pairs():
    """The detector can fail: PML's own miner and SupCon (index tuples) run data-dependent ops."""
    from pytorch_metric_learning import losses, miners
    emb, labels = torch.randn(8, 4), torch.arange(8) % 3
    with DeviceReads() as reads:
        losses.SupConLoss(0.1)(emb, labels, miners.PairMarginMiner()(emb, labels))
    assert "nonzero" in reads.ops and "_local_scalar_dense" in reads.ops


@needs_cuda
@pytest.mark.parametrize("kind", KINDS)
def test_twenty_cuda_training_steps_synchronise_only_for_the_finiteness_check(kind, monkeypatch):
    """Bug caught (issue 18): anything in a CUDA training step (loss, miner, memory, normaliser, fused
    optimiser, clipping, pair counts) that makes the CPU wait for the GPU. CUDA's sync debug mode raises
    on each; only the one check per step (``_raise_if_bad``, the previous step's flag) and the epoch's own
    edges (``Runtime.synchronize`` around the pass, the sums read once at its end) are let through."""
    from xbm.training.runtime import Runtime
    trainer = tiny_trainer(device="cuda", **{"normaliser.kind": kind, "memory.ratio": 0.5})

    def allowed(fn):
        def wrapped(*args):
            torch.cuda.set_sync_debug_mode("default")
            try:
                return fn(*args)
            finally:
                torch.cuda.set_sync_debug_mode("error")
        return wrapped

    monkeypatch.setattr(epoch_module, "_raise_if_bad", allowed(epoch_module._raise_if_bad))
    monkeypatch.setattr(epoch_module._Sums, "read", allowed(epoch_module._Sums.read))
    monkeypatch.setattr(Runtime, "synchronize", allowed(Runtime.synchronize))
    step = Step(trainer.model, trainer.objective, trainer.criterion(0), trainer.optimizer, trainer.scaler,
                list(trainer.model.parameters()), trainer.cfg.clip_grad, trainer.prepare_train)
    assert epoch_module.skips_on_device(step)   # fused AdamW, no loss scaling (bf16 or fp32)
    run_epoch(step, trainer.loader, trainer.runtime, epoch=1, epoch_index=0)   # fills the memory
    batches = [tuple(t.cuda() for t in batch) for batch in list(trainer.loader) * 4][:20]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        result = run_epoch(step, batches, trainer.runtime, epoch=2, epoch_index=1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert result.iterations == 20 and math.isfinite(result.loss)
