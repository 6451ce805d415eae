"""The running moments of AXBN / EMA follow the device the embeddings are on.

The "meta" device stands in for a GPU on a CPU-only machine: its kernels refuse operands from another
device as CUDA's do, so a running moment left on the CPU fails here as it would on the first GPU step.
"""
from __future__ import annotations

import pytest
import torch

from xbm.normalisers import NormaliserConfig, build_normaliser

from .test_kinds import COMBOS, OPTIONS
from ..conftest import needs_cuda


def _call(norm, device):
    long = dict(dtype=torch.long, device=device)
    return norm(torch.randn(6, 3, device=device), torch.zeros(6, **long),
                torch.randn(4, 3, device=device), torch.zeros(4, **long))


@pytest.mark.parametrize("kind", ["axbn", "ema"])
def test_running_moments_move_to_the_embeddings_device(kind):
    """Bug caught (mutation testing): running moments estimated on the CPU (e.g. restored from a CPU
    checkpoint) not moved when training goes on on the GPU (the device test inverted, ``.to(None)``,
    or the moments dropped), a device-mismatch crash at the first step after a resume."""
    norm = build_normaliser(NormaliserConfig(kind=kind))
    _call(norm, "cpu")
    out = _call(norm, "meta")
    assert out.device.type == norm.mu_hat.device.type == norm.sigma_hat.device.type == "meta"
    assert norm.mu_hat.shape == norm.sigma_hat.shape == (3,)


@pytest.mark.filterwarnings("ignore:for .*copying from a non-meta parameter")
@pytest.mark.parametrize("kind", ["axbn", "ema"])
def test_a_loaded_checkpoint_lands_on_the_normalisers_device(kind):
    """Bug caught (mutation testing): the running moments resized on load on the checkpoint's device
    instead of the module's (``empty_like`` without ``device=``), so a GPU normaliser restored from a
    CPU checkpoint holds them on the CPU."""
    source = build_normaliser(NormaliserConfig(kind=kind))
    _call(source, "cpu")
    target = build_normaliser(NormaliserConfig(kind=kind)).to("meta")
    target.load_state_dict(source.state_dict())
    assert target.mu_hat.device.type == target.sigma_hat.device.type == "meta"
    assert target.mu_hat.shape == target.sigma_hat.shape == (3,)


@needs_cuda
@pytest.mark.parametrize("kind,centre_only,unit_norm,absent", COMBOS)
def test_every_kind_on_cuda_with_cpu_labels_matches_the_float64_reference(kind, centre_only, unit_norm, absent,
                                                                           reference, case):
    """Bugs caught: a label or super-class map left on the loader's device (the CPU) while the embeddings
    are on the GPU (``labels.to(z.device)`` or ``superclass_of.to(labels.device)`` dropped: a device-mismatch
    crash at the first step), or the single-chunk CUDA path of the moments computing other values than the
    chunked CPU one."""
    cfg = NormaliserConfig(kind=kind, centre_only=centre_only, unit_norm=unit_norm, absent=absent, **OPTIONS)
    norm = build_normaliser(cfg, superclass_of=case.superclass_of)  # the map stays on the CPU
    ref = reference(cfg, superclass_of=case.superclass_of)
    for step in range(5):
        memory, memory_labels = case.memory(step)
        batch, batch_labels = case.batch(step)
        got = norm(memory.cuda(), memory_labels, batch.cuda(), batch_labels, epoch=step)
        assert got.is_cuda
        want = ref(memory, memory_labels, batch, batch_labels, epoch=step)
        torch.testing.assert_close(got.cpu().double(), want, rtol=2e-5, atol=2e-5)


def _grouped(n: int = 3_000, d: int = 32, groups: int = 65, seed: int = 0):
    """Rows with group-dependent offsets and one group far larger than the others, as PC-XBN's spare slot."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.where(torch.rand(n, generator=gen) < 0.9, groups - 1, torch.randint(0, groups, (n,), generator=gen))
    x = 3 * torch.randn(groups, d, generator=gen)[ids] + torch.randn(n, d, generator=gen)
    return x, ids


def _float64_sums(x, ids, groups):
    x, counts = x.double(), torch.bincount(ids, minlength=groups).double().unsqueeze(1)
    mean = torch.zeros(groups, x.shape[1], dtype=torch.float64).index_add_(0, ids, x) / counts.clamp_min(1)
    m2 = torch.zeros_like(mean).index_add_(0, ids, (x - mean[ids]) ** 2)
    return counts, mean, m2


@pytest.mark.parametrize("dense", [False, True], ids=["index_add (CPU)", "one-hot product (GPU)"])
def test_group_sums_match_a_float64_reference(dense, monkeypatch):
    """Bugs caught: a group-sum path (the CPU's index_add_ or the GPU's one-hot product, both run here) that
    adds rows to the wrong group, drops the last partial block of rows, or takes squares about another mean;
    checked in blocks of a few hundred rows too."""
    from xbm.normalisers import stats

    x, ids = _grouped()
    want = _float64_sums(x, ids, 65)
    for block in (stats.DENSE_ELEMENTS, 65 * 333):
        monkeypatch.setattr(stats, "DENSE_ELEMENTS", block)
        got = stats.group_sums(x, ids, 65, dense=dense)
        for g, w in zip((got.counts, got.mean, got.m2), want):
            torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-4)
        counts = stats.group_counts(ids, 65, dense=dense).double()
        torch.testing.assert_close(counts, want[0].squeeze(1), rtol=0, atol=0)


def test_one_hot_group_sums_stay_full_fp32_under_tf32_and_autocast():
    """Bugs caught: the GPU's one-hot product run in TF32 (a CUDA run sets matmul precision "high": x rounded
    to a 10-bit mantissa, per-class moments off by ~1e-3) or under the step's bf16 autocast (8 bits). The CPU
    stands in: its autocast takes a matmul to bf16 as CUDA's does, and every GEMM records its precision."""
    from xbm.normalisers import stats

    from ..conftest import assert_full_fp32_gemms

    x, ids = _grouped()
    want = _float64_sums(x, ids, 65)[1]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = stats.group_sums(x, ids, 65, dense=True)
    assert got.mean.dtype == torch.float32
    torch.testing.assert_close(got.mean.double(), want, rtol=1e-5, atol=1e-5)
    assert_full_fp32_gemms(lambda: stats.group_sums(x, ids, 65, dense=True))


def test_the_one_hot_matrix_is_built_once_for_counts_sums_and_squares(monkeypatch):
    """Bug caught: the one-hot matrix built again for each pass (counts, sums, squares about the means): on an
    H100 PC-XBN was bound by its kernel launches (1.1 ms of GPU time in 2.96 ms a call), and each build is 5
    launches and a [G, n] write. With more rows than one block holds, each pass builds its blocks again."""
    from xbm.normalisers import stats

    built = []
    original = stats._one_hot
    monkeypatch.setattr(stats, "_one_hot", lambda ids, n: built.append(len(ids)) or original(ids, n))
    x, ids = _grouped()
    stats.group_sums(x, ids, 65, dense=True)
    assert built == [len(ids)]
    built.clear()
    monkeypatch.setattr(stats, "DENSE_ELEMENTS", 65 * 333)
    stats.group_sums(x, ids, 65, dense=True)
    blocks = -(-len(ids) // 333)
    assert len(built) == 3 * blocks and max(built) == 333   # counts, sums, squares: block by block


@pytest.mark.parametrize("kind", ["pcxbn", "scxbn"])
def test_a_group_kind_encodes_the_memory_s_and_the_batch_s_groups_once_each(kind, monkeypatch):
    """Bug caught: the slots counted first (which groups get their own map), then remapped and one-hot encoded
    again for the sums: 4 [B + 1, n] builds a call instead of 2, and their launches (PC-XBN on an H100 is bound
    by its launches: 161 aten ops a call, XBN 28)."""
    from xbm.normalisers import stats

    built = []
    original = stats._one_hot
    monkeypatch.setattr(stats, "_one_hot", lambda ids, n: built.append(len(ids)) or original(ids, n))
    monkeypatch.setattr(stats, "uses_dense_sums", lambda device: True)   # the GPU's path, on the CPU
    norm = build_normaliser(NormaliserConfig(kind=kind), superclass_of=torch.arange(40) // 8, num_labels=40)
    g = torch.Generator().manual_seed(0)
    memory, batch = torch.randn(300, 8, generator=g), torch.randn(16, 8, generator=g)
    norm(memory, torch.randint(0, 40, (300,), generator=g), batch, torch.arange(4).repeat_interleave(4))
    assert sorted(built) == [16, 300]


def test_the_group_sums_take_the_one_hot_product_off_the_cpu(monkeypatch):
    """Bug caught: a GPU run falling back to index_add_ (atomics: ranks' memories drift apart by rounding; or
    torch's deterministic mode: 146x XBN), or the CPU taking the product (28 ms against index_add_'s 7 ms per
    pass at 60,000 x 512). The "meta" device stands in for a GPU: shapes only, the path taken is recorded."""
    from xbm.normalisers import stats

    taken = []
    original = stats._add_by_group
    monkeypatch.setattr(stats, "_add_by_group", lambda *args: taken.append(args[4]) or original(*args))
    for device in ("cpu", "meta"):
        stats.group_sums(torch.randn(8, 3, device=device), torch.tensor([0, 1] * 4, device=device), 2)
    assert taken == [False, False, True, True]
    assert not torch.are_deterministic_algorithms_enabled()


@needs_cuda
@pytest.mark.parametrize("kind", ["pcxbn", "scxbn"])
def test_cuda_group_kinds_are_bit_identical_run_to_run_and_near_the_cpu(kind):
    """Bug caught (on a GPU): group sums by atomics (CUDA's index_add_) making the same memory's adapted rows
    differ between runs, and so between data-parallel ranks; at the benchmark's size (60,000 x 512, batch 64 of
    16 classes, 11,000 classes), so that the spare slot holds almost every row. The CPU's index_add_ agrees
    to fp32 rounding."""
    from xbm.normalisers import NormaliserConfig, build_normaliser

    gen = torch.Generator().manual_seed(0)
    memory = torch.nn.functional.normalize(torch.randn(60_000, 512, generator=gen), dim=1)
    labels = torch.randint(0, 11_000, (60_000,), generator=gen)
    batch = torch.nn.functional.normalize(torch.randn(64, 512, generator=gen), dim=1)
    batch_labels = labels[torch.randperm(60_000, generator=gen)[:16]].repeat_interleave(4)
    norm = build_normaliser(NormaliserConfig(kind=kind), superclass_of=torch.arange(11_000) % 12, num_labels=11_000)
    on_cpu = norm(memory, labels, batch, batch_labels)
    norm = norm.cuda()
    args = memory.cuda(), labels.cuda(), batch.cuda(), batch_labels.cuda()
    first, second = norm(*args), norm(*args)
    assert torch.equal(first, second)
    torch.testing.assert_close(first.cpu(), on_cpu, rtol=1e-5, atol=1e-5)
