"""Host synchronisations of a training step: at most one per step (issue 18, "a step without host waits").

On the CPU nothing waits, so what would wait on a GPU is counted instead, two ways:

- every way Python reads a tensor's value (``item``, ``float``, ``int``, ``bool``, ``tolist``, ``numpy``,
  ``__index__``) patched to count its calls while ``run_epoch`` runs a step;
- :class:`~.device_reads.DeviceReads`, a dispatch mode that sees every aten op of a step (C++ callers too): value
  reads, ops whose output size depends on the data, Python values becoming tensors, copies to the host.

Either way the loader's ``next`` is excluded (collation is not the step). On a GPU, CUDA's sync debug mode
checks the same steps (the ``needs_cuda`` tests at the end)."""
from __future__ import annotations

import contextlib
import math
from collections import Counter

import numpy as np
import pytest
import torch

from xbm.config import LABELLED_NORMALISERS
from xbm.registries import NORMALISERS as KINDS
from xbm.training import epoch as epoch_module
from xbm.training.epoch import Step, run_epoch

from ..conftest import needs_cuda, tiny_trainer
from .device_reads import DeviceReads, Read, stepped

READS = ("item", "__float__", "__int__", "__bool__", "tolist", "numpy", "__index__")


class ReadCounter:
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
    counter = ReadCounter()
    for name in READS:
        monkeypatch.setattr(torch.Tensor, name, counter.wrap(name, getattr(torch.Tensor, name)))
    step = _main_step(trainer)
    result = run_epoch(step, _counted_loader(trainer.loader, counter), trainer.runtime, epoch=2, epoch_index=1)
    assert result.iterations == len(counter.steps) == 6 and trainer.xbm.last_stats["memory_fill"] == 1.0
    assert trainer.xbm.last_stats["adapted"] == (0.0 if kind == "none" else 1.0)
    # Step 1 reads nothing; every later step reads the previous step's finiteness flag, and only that.
    assert counter.steps == [[]] + [["__bool__"]] * 5
    assert result.pairs["memory_pos_pairs"] > result.pairs["batch_pos_pairs"] > 0


# ---- the dispatch-mode detector (tests/xbm/training/device_reads.py) over twenty steps ----

STEPS = 20
# The one read a step may make: the previous step's finiteness flag (fused optimiser, one step late); at the
# epoch's end the last step's flag and the epoch's sums (one transfer).
CHECK = Read("_local_scalar_dense", "xbm/training/epoch.py:_raise_if_bad")
END = [CHECK, Read("tolist", "xbm/training/epoch.py:_Sums.read")]
OBJECTIVES = {   # name -> dotted config values
    "supervised": {},
    "supervised+batch": {"memory.batch_loss_weight": 0.5},   # the in-batch term as well
    "instance": {"objective": "instance"},
    "moco": {"objective": "moco"},
    "neighbours": {"objective": "neighbours", "batch_size": 32},
}
# Host work by design, per step, which the CPU cannot tell from device work: MoCo's query/key layout
# (``is_key``) is a CPU tensor on every device, written with a Python scalar; XBMLoss's ``split_rows`` reads
# that host mask with NumPy and copies the positions it finds non_blocking (no device read either way: on an
# H100, CUDA's sync debug mode let ``torch.from_numpy(...).to("cuda", non_blocking=True)`` pass and raised on
# ``t[i] = False`` into a CUDA tensor). Named by site and count, so that any other such op there still fails.
HOST_WORK = {"moco": Counter({Read("lift_fresh", "xbm/objectives/moco.py:MoCo.forward"): 1,
                              Read("cpu", "xbm/losses/xbm_loss.py:split_rows"): 1, Read("numpy", "xbm/losses/xbm_loss.py:split_rows"): 1,
                              Read("lift_fresh", "xbm/losses/xbm_loss.py:split_rows.<locals>.<genexpr>"): 2})}
def _cases():
    for objective, values in OBJECTIVES.items():
        for kind in KINDS:
            if kind in LABELLED_NORMALISERS and "objective" in values:
                continue   # label-free objectives refuse the kinds that need class labels (xbm.config)
            yield pytest.param(objective, kind, id=f"{objective}-{kind}")


def _reads_per_step(trainer, steps: int = STEPS):
    """``DeviceReads.steps`` of ``steps`` main-phase steps after a first epoch (which fills the memory, builds
    the neighbours' pool and the optimiser's state), on the first epoch's batches repeated; and the result."""
    trainer.objective.begin_epoch(0, trainer._embed_training_set, trainer.loader.sampler.sampler)
    step = _main_step(trainer)
    run_epoch(step, trainer.loader, trainer.runtime, epoch=1, epoch_index=0)
    batches = (list(trainer.loader) * steps)[:steps]
    with DeviceReads() as reads:
        result = run_epoch(step, stepped(batches, reads), trainer.runtime, epoch=2, epoch_index=1)
    assert result.iterations == steps and len(reads.steps) == steps + 2
    return reads.steps, result


def _assert_one_check_per_step(steps, host=Counter()) -> None:
    """Nothing before the first step or in it; one CHECK in each later step; END at the epoch's end."""
    left = [sorted((Counter(step) - host).elements()) for step in steps]
    want = [[], []] + [[CHECK]] * (len(steps) - 3) + [sorted(END)]
    listed = "\n".join(f"  {'before' if i == 0 else 'end' if i == len(steps) - 1 else f'step {i}'}: "
                        + ", ".join(map(str, ops)) for i, ops in enumerate(left) if ops != want[i])
    assert left == want, f"device reads besides the one check per step:\n{listed}"


@pytest.mark.parametrize("objective, kind", list(_cases()))
def test_twenty_steps_of_every_kind_and_objective_read_the_device_only_for_the_check(objective, kind):
    """Bugs caught (anything that waits for a GPU inside a step, seen at the aten level, C++ callers included):
    pairs built as index tuples (PML's miner: ``torch.where``, boolean indexing; the self-pair removal; PML's
    AvgNonZeroReducer); ``torch.unique``/``bincount`` in the group kinds; a Python scalar written into a device
    tensor (``t[i] = False``: a blocking host-to-device copy) or ``torch.tensor([...])`` inside a step; a value
    read with ``.item()``/``.tolist()``/``.cpu()``; MoCo's batch split by boolean indexing with its key mask; the
    label-free objectives' pair losses. Every normaliser kind under every objective, twenty steps of a fused
    optimiser as on CUDA, with and without the in-batch term."""
    trainer = tiny_trainer(**{"normaliser.kind": kind, "memory.ratio": 0.5, **OBJECTIVES[objective]})
    steps, result = _reads_per_step(trainer)
    host = HOST_WORK.get(objective, Counter())
    assert all(Counter(step) >= host for step in steps[1:-1]), "HOST_WORK names host work the step no longer does"
    _assert_one_check_per_step(steps, host)
    assert trainer.xbm.last_stats["memory_fill"] == 1.0
    assert trainer.xbm.last_stats["adapted"] == (0.0 if kind == "none" else 1.0)
    assert result.pairs["memory_pos_pairs"] > 0 and result.pairs["memory_neg_pairs"] > 0


@pytest.mark.parametrize("objective", ["supervised", "instance"])
def test_a_prefilled_indexed_memory_reads_the_device_only_for_the_check(objective):
    """Bug caught: an indexed memory that reads its fill or gathers its written rows (``nonzero``) in every step
    even when full: a prefilled memory is full from its first step, so its steps must wait as the ring's do."""
    trainer = tiny_trainer(**{"normaliser.kind": "xbn", "memory.update": "indexed", "memory.ratio": 1.0,
                              "memory.prefill": True, **OBJECTIVES[objective]})
    trainer._prefill_memory()
    steps, _ = _reads_per_step(trainer)
    _assert_one_check_per_step(steps, HOST_WORK.get(objective, Counter()))
    assert trainer.xbm.last_stats["memory_fill"] == 1.0 and trainer.xbm.last_stats["adapted"] == 1.0


def test_a_partly_written_indexed_memory_finds_its_rows_once_a_step():
    """Until every row is written the written rows have a data-dependent count: one read per step, in
    ``enqueue``. Bug caught: ``valid()``, the adapted rows' write-back and the loss's ``valid()`` each finding
    them again (four waits a step, seen before the rows were kept between writes)."""
    trainer = tiny_trainer(**{"normaliser.kind": "xbn", "memory.update": "indexed", "memory.ratio": 1.0})
    steps, _ = _reads_per_step(trainer)
    found = Read("nonzero", "xbm/memory/indexed.py:IndexedMemory._written_rows")
    assert [Counter(step)[found] for step in steps[1:-1]] == [1] * STEPS
    assert all(set(step) <= {found, CHECK} for step in steps[1:-1])
    assert trainer.xbm.last_stats["memory_fill"] < 1.0


@pytest.mark.parametrize("values", [{"loss.kind": "contrastive"}, {"loss.kind": "contrastive", "miner.kind": "none"},
                                    {"loss.kind": "ntxent"}], ids=lambda v: ",".join(f"{k}={v[k]}" for k in v))
def test_the_losses_on_pair_masks_read_the_device_only_for_the_check(values):
    """Bug caught: a loss kind whose pair loss falls back to PML's index tuples (``supports_masks`` refusing it,
    e.g. for the ``MultipleReducers`` PML wraps around the contrastive loss's two sub-losses), so every step
    waits for the device about ten times. (The label-free objectives' losses: the test above.)"""
    trainer = tiny_trainer(**{"memory.ratio": 0.5, **values})
    steps, _ = _reads_per_step(trainer)
    _assert_one_check_per_step(steps)
    assert trainer.xbm.last_stats["memory_fill"] == 1.0


def test_the_detector_sees_pmls_index_pairs():
    """The detector can fail: PML's own miner and SupCon (index tuples) run data-dependent ops."""
    from pytorch_metric_learning import losses, miners
    emb, labels = torch.randn(8, 4), torch.arange(8) % 3
    with DeviceReads() as reads:
        losses.SupConLoss(0.1)(emb, labels, miners.PairMarginMiner()(emb, labels))
    assert "nonzero" in reads.ops and "_local_scalar_dense" in reads.ops


def _plant_scalar_write(x, mask):
    x[0] = False


PLANTED = {  # what a step might do -> (the code, the op the detector must record)
    "t[0] = False": (_plant_scalar_write, "lift_fresh"),
    "torch.tensor([...])": (lambda x, mask: torch.tensor([1, 2]), "lift_fresh"),
    "torch.from_numpy": (lambda x, mask: torch.from_numpy(np.arange(3)), "lift_fresh"),
    "item": (lambda x, mask: x[0].item(), "_local_scalar_dense"),
    "bool": (lambda x, mask: bool(mask.any()), "_local_scalar_dense"),
    "torch.equal": (lambda x, mask: torch.equal(x, x), "equal"),
    "tolist": (lambda x, mask: x.tolist(), "tolist"),
    "numpy": (lambda x, mask: x.numpy(), "numpy"),
    "cpu": (lambda x, mask: x.cpu(), "cpu"),
    "torch.where(mask)": (lambda x, mask: torch.where(mask), "nonzero"),
    "x[mask]": (lambda x, mask: x[mask], "index with a boolean mask"),
    "x[mask] = 0": (lambda x, mask: x.__setitem__(mask, 0.0), "index_put_ with a boolean mask"),
    "masked_select": (lambda x, mask: x.masked_select(mask), "masked_select"),
    "torch.unique": (lambda x, mask: torch.unique(x), "_unique2"),
    "torch.unique(dim)": (lambda x, mask: torch.unique(x[:, None], dim=0), "unique_dim"),
    "unique_consecutive": (lambda x, mask: torch.unique_consecutive(x), "unique_consecutive"),
    "unique_consecutive(dim)": (lambda x, mask: torch.unique_consecutive(x[:, None], dim=0), "unique_consecutive"),
    "bincount": (lambda x, mask: torch.bincount(mask.long()), "bincount"),
    "repeat_interleave": (lambda x, mask: torch.repeat_interleave(mask.long()), "repeat_interleave"),
}


@pytest.mark.parametrize("name", PLANTED)
def test_the_detector_sees_each_kind_of_device_read(name):
    """The detector can fail for each class of op it claims to see, and names the line of this repository that
    ran it (here: this test module)."""
    code, op = PLANTED[name]
    x, mask = torch.tensor([1.0, 2.0, 2.0, 3.0]), torch.tensor([True, False, True, False])
    with DeviceReads() as reads:
        code(x.clone(), mask)
    assert op in reads.ops, reads.reads
    assert {read.site.split(":")[0] for read in reads.reads} == {"tests/xbm/training/test_host_syncs.py"}


def test_the_detector_passes_what_never_waits():
    """The detector must not cry wolf: elementwise ops with Python scalars, factories, index_select /
    index_fill_ / masked_fill_ / where with three arguments, sorting and a reduction left on the device."""
    x, mask = torch.randn(6, 3), torch.tensor([True, False, True, False, True, False])
    with DeviceReads() as reads:
        y = (x * 2.0 + 1).clamp_(min=0.0).masked_fill(mask[:, None], 0.0)
        z = torch.zeros(6).index_fill_(0, torch.arange(2), 1.0).index_select(0, torch.arange(3))
        torch.where(mask, x[:, 0], 0.0).sort().values.cumsum(0), y.sum() > 0, torch.full((2,), 3.0) + z[:2]
    assert reads.reads == []


# ---- CUDA: the sync debug mode raises on each wait ----

@contextlib.contextmanager
def sync_debug(mode: str):
    """CUDA's sync debug mode set to ``mode`` inside; the mode found is put back on the way out, an error
    inside included, so a failing test leaves no "error" mode to the later tests of its process."""
    found = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(mode)
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(found)


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
    with sync_debug("error"):
        for step in range(20):
            norm(memory, labels, batch, batch_labels, epoch=step, out=memory)
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
    with sync_debug("error"):
        for _ in range(20):
            memory.enqueue(batch, labels, labels, iteration=iteration)
            iteration += 1
    assert memory.iterations.max().item() == 19


@needs_cuda
@pytest.mark.usefixtures("cuda_run_settings_restored")
@pytest.mark.parametrize("kind", KINDS)
def test_twenty_cuda_training_steps_synchronise_only_for_the_finiteness_check(kind, monkeypatch):
    """Bug caught (issue 18): anything in a CUDA training step (loss, miner, memory, normaliser, fused
    optimiser, clipping, pair counts) that makes the CPU wait for the GPU. CUDA's sync debug mode raises
    on each; only the one check per step (``_raise_if_bad``, the previous step's flag) and the epoch's own
    edges (``Runtime.synchronize`` around the pass, the sums read once at its end) are let through. The
    first epoch (filling the memory) and the copies of the batches to the GPU run in the default mode."""
    from xbm.runtime.device import Runtime
    trainer = tiny_trainer(device="cuda", **{"normaliser.kind": kind, "memory.ratio": 0.5})

    def allowed(fn):
        def wrapped(*args):
            with sync_debug("default"):   # and back to the mode it found: "error" only inside the checked epoch
                return fn(*args)
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
    with sync_debug("error"):
        result = run_epoch(step, batches, trainer.runtime, epoch=2, epoch_index=1)
    assert result.iterations == 20 and math.isfinite(result.loss)


@pytest.mark.filterwarnings("ignore:Synchronization debug mode is a prototype feature")
def test_the_sync_debug_context_puts_back_the_mode_it_found_after_an_error():
    """Bug caught: the CUDA sync test's wrapper set the mode to "error" on its way out whatever it found, so the
    warm-up epoch ran checked, raised before the test's ``try``, and left "error" to every later test of that
    xdist worker (eight CPU-path tests failed there on the first GPU run). Without a GPU, CUDA's own flag is
    read and set through torch._C (the public calls initialise CUDA first)."""
    modes = {"default": 0, "warn": 1, "error": 2}
    seen = []
    get, set_ = torch._C._cuda_get_sync_debug_mode, torch._C._cuda_set_sync_debug_mode
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.cuda, "get_sync_debug_mode", get)
        mp.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: set_(modes.get(mode, mode)))
        with pytest.raises(RuntimeError, match="planted"):
            with sync_debug("error"):
                seen.append(get())
                with sync_debug("default"):
                    seen.append(get())
                seen.append(get())
                raise RuntimeError("planted")
        assert seen == [2, 0, 2] and get() == 0
