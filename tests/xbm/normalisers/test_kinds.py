"""Every kind x centre_only x unit_norm (x absent for the group kinds) against the float64 reference."""
from __future__ import annotations

import itertools

import pytest
import torch

from xbm.normalisers import NORMALISERS, NormaliserConfig, build_normaliser, stats
from xbm.registries import NORMALISERS as KINDS

# Non-default filter and blend settings, so every term of every formula matters.
OPTIONS = dict(kalman_r=5.0, kalman_q=0.5, kalman_p0=2.0, kalman_interval=2, ema_momentum=0.6,
               lambda_mu=0.3, lambda_sigma=0.7)
COMBOS = [
    (kind, centre, unit, absent)
    for kind in KINDS
    for centre, unit in itertools.product((False, True), repeat=2)
    for absent in (("global", "skip") if kind in ("pcxbn", "scxbn") else ("global",))
]


@pytest.fixture(params=["one chunk", "chunks of 7 rows", "one-hot sums", "one-hot sums in chunks"])
def chunking(request, monkeypatch):
    """Also run the CPU chunked passes with many small chunks (tests' tensors fit in one), and the group sums
    by the one-hot product that a GPU takes (whole, and in blocks of a few rows)."""
    if request.param == "chunks of 7 rows":
        monkeypatch.setattr(stats, "chunks", lambda x: 7)
    if request.param.startswith("one-hot"):
        monkeypatch.setattr(stats, "uses_dense_sums", lambda device: True)
    if request.param == "one-hot sums in chunks":
        monkeypatch.setattr(stats, "DENSE_ELEMENTS", 40)   # 9 slots x 4 rows per block


@pytest.mark.parametrize("kind,centre_only,unit_norm,absent", COMBOS)
def test_matches_float64_reference_over_a_sequence(kind, centre_only, unit_norm, absent, reference, case, chunking):
    cfg = NormaliserConfig(kind=kind, centre_only=centre_only, unit_norm=unit_norm, absent=absent, **OPTIONS)
    norm = build_normaliser(cfg, superclass_of=case.superclass_of)
    ref = reference(cfg, superclass_of=case.superclass_of)
    for step in range(5):   # five calls: the Kalman gain is updated on calls 0, 2 and 4
        memory, memory_labels = case.memory(step)
        batch, batch_labels = case.batch(step)
        before = memory.clone(), batch.clone()
        got = norm(memory, memory_labels, batch, batch_labels, epoch=step)
        want = ref(memory, memory_labels, batch, batch_labels, epoch=step)
        assert got.dtype == memory.dtype and got.shape == memory.shape
        torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=2e-5)
        torch.testing.assert_close((memory, batch), before, rtol=0, atol=0)   # inputs untouched
        assert got.data_ptr() != memory.data_ptr()


@pytest.mark.parametrize("kind", ["xbn", "axbn", "ema", "pcxbn", "scxbn"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_inputs_use_fp32_statistics(kind, dtype, reference, case):
    cfg = NormaliserConfig(kind=kind, **OPTIONS)
    norm = build_normaliser(cfg, superclass_of=case.superclass_of)
    ref = reference(cfg, superclass_of=case.superclass_of)
    for step in range(2):
        memory, memory_labels = case.memory(step, dtype)
        batch, batch_labels = case.batch(step, dtype)
        got = norm(memory, memory_labels, batch, batch_labels, epoch=0)
        want = ref(memory, memory_labels, batch, batch_labels)   # from the same rounded inputs
        assert got.dtype == dtype
        # Only the final rounding to the half type differs from the float64 result.
        torch.testing.assert_close(got, want.to(dtype), rtol=1e-2, atol=1e-2)
        assert (got.double() - want).abs().max() <= 2 * torch.finfo(dtype).eps * want.abs().max()


@pytest.mark.parametrize("kind", KINDS)
def test_output_is_detached_and_never_tracks_gradients(kind, case):
    norm = build_normaliser(NormaliserConfig(kind=kind), superclass_of=case.superclass_of)
    memory, memory_labels = case.memory(0)
    batch, batch_labels = case.batch(0)
    out = norm(memory.requires_grad_(), memory_labels, batch.requires_grad_(), batch_labels)
    assert not out.requires_grad and out.grad_fn is None


def test_each_kind_of_the_registry_builds_its_own_class():
    """Bug caught: a registry entry pointing at another kind's class (a sweep over kinds training one twice)."""
    for kind, cls in NORMALISERS.items():
        assert cls.kind == kind


@pytest.mark.parametrize("kind,centre_only,unit_norm,absent", COMBOS)
def test_out_argument_adapts_in_place_with_the_same_result(kind, centre_only, unit_norm, absent, case):
    cfg = NormaliserConfig(kind=kind, centre_only=centre_only, unit_norm=unit_norm, absent=absent, **OPTIONS)
    fresh = build_normaliser(cfg, superclass_of=case.superclass_of)
    in_place = build_normaliser(cfg, superclass_of=case.superclass_of)
    for step in range(3):
        memory, memory_labels = case.memory(step)
        batch, batch_labels = case.batch(step)
        want = fresh(memory, memory_labels, batch, batch_labels)
        got = in_place(memory, memory_labels, batch, batch_labels, out=memory)
        assert got is memory
        torch.testing.assert_close(memory, want, rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["pcxbn", "scxbn"])
@pytest.mark.parametrize("centre_only", [False, True])
@pytest.mark.parametrize("absent", ["global", "skip"])
def test_group_kinds_with_few_member_rows(kind, centre_only, absent, reference, chunking):
    """Many classes, few of them in the batch: most memory rows fall in the spare (fallback) slot."""
    gen = torch.Generator().manual_seed(7)
    memory_labels = torch.arange(120) % 60                       # 60 classes, 2 rows each
    memory = torch.randn(120, 4, generator=gen) * 2 + memory_labels.unsqueeze(1) / 30
    batch_labels = torch.tensor([3, 3, 8, 8, 8, 11, 11, 50])      # class 50: a single batch row
    batch = torch.randn(8, 4, generator=gen)
    superclass_of = torch.arange(60) % 17                              # 17 super-classes
    cfg = NormaliserConfig(kind=kind, centre_only=centre_only, absent=absent, lambda_mu=0.2, lambda_sigma=0.6)
    got = build_normaliser(cfg, superclass_of=superclass_of)(memory, memory_labels, batch, batch_labels)
    want = reference(cfg, superclass_of=superclass_of)(memory, memory_labels, batch, batch_labels)
    torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("kind", ["xbn", "axbn", "ema", "pcxbn", "scxbn"])
def test_a_constant_dimension_is_floored_at_eps_not_divided_by_zero(kind, reference, case):
    """Bug caught (mutation testing): a standard deviation not floored at ``eps`` (whole-memory, per-group
    or pooled): a dimension that is constant in the memory (a dead ReLU unit, a saturated feature)
    then divides 0 by 0 and writes NaN into every memory row."""
    cfg = NormaliserConfig(kind=kind, eps=1e-3, **OPTIONS)
    norm = build_normaliser(cfg, superclass_of=case.superclass_of)
    ref = reference(cfg, superclass_of=case.superclass_of)
    for step in range(2):
        memory, memory_labels = case.memory(step)
        batch, batch_labels = case.batch(step)
        memory[:, 0] = 1.5
        batch[:, 1] = -0.5
        got = norm(memory, memory_labels, batch, batch_labels)
        assert torch.isfinite(got).all()
        # atol 1e-3: the fused map z * a + b with a = sigma_B / eps ~ 2e3 cancels ~1e-4 in fp32
        torch.testing.assert_close(got.double(), ref(memory, memory_labels, batch, batch_labels),
                                   rtol=2e-5, atol=1e-3)


# memory classes 0..5, two to four rows each
SPARSE_MEMORY_LABELS = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 4, 4, 5, 5, 5])


@pytest.mark.parametrize("batch_labels", [[0, 1, 2, 3, 6, 7],        # no class twice: nothing to adapt per class
                                          [2, 2, 0, 1, 3, 7],        # exactly one class twice
                                          [6, 6, 7, 7, 8, 0]],       # repeated classes absent from the memory
                         ids=["no-candidate", "one-candidate", "no-member"])
@pytest.mark.parametrize("absent", ["global", "skip"])
@pytest.mark.parametrize("centre_only", [False, True])
def test_pcxbn_batches_with_zero_or_one_repeated_class(batch_labels, absent, centre_only, reference):
    """Bug caught (mutation testing): PC-XBN on a batch where no class, or exactly one, has two rows
    (small batches, early in a P x K sampler's epoch), or whose repeated classes have no memory rows:
    the empty-candidate branch of the slot lookup mistaken for the one-candidate one (the one repeated
    class never adapted), an index past the one-entry "enough rows" table, or a division by a zero
    member count."""
    gen = torch.Generator().manual_seed(3)
    memory = torch.randn(len(SPARSE_MEMORY_LABELS), 4, generator=gen) * 2 + SPARSE_MEMORY_LABELS.unsqueeze(1) / 3
    batch = torch.randn(len(batch_labels), 4, generator=gen) - 0.5
    batch_labels = torch.tensor(batch_labels)
    cfg = NormaliserConfig(kind="pcxbn", centre_only=centre_only, absent=absent, lambda_mu=0.2, lambda_sigma=0.6)
    got = build_normaliser(cfg)(memory, SPARSE_MEMORY_LABELS, batch, batch_labels)
    want = reference(cfg)(memory, SPARSE_MEMORY_LABELS, batch, batch_labels)
    torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("kind", ["xbn", "axbn", "ema", "pcxbn", "scxbn"])
@pytest.mark.parametrize("n_memory,n_batch", [(2, 5), (7, 2), (2, 2)])
def test_two_rows_are_enough_to_adapt(kind, n_memory, n_batch, reference):
    """Bug caught (mutation testing): the "fewer than 2 rows" guard moved to 3 (``< 3`` or ``<= 2``), so
    a memory or batch of exactly two rows, whose Bessel std is defined, is silently left unadapted."""
    gen = torch.Generator().manual_seed(n_memory + 10 * n_batch)
    memory, batch = torch.randn(n_memory, 3, generator=gen) * 3 + 1, torch.randn(n_batch, 3, generator=gen)
    memory_labels, batch_labels = torch.zeros(n_memory, dtype=torch.long), torch.zeros(n_batch, dtype=torch.long)
    cfg = NormaliserConfig(kind=kind)
    got = build_normaliser(cfg, superclass_of=torch.zeros(1, dtype=torch.long))(memory, memory_labels, batch,
                                                                                 batch_labels)
    want = reference(cfg, superclass_of=torch.zeros(1, dtype=torch.long))(memory, memory_labels, batch, batch_labels)
    torch.testing.assert_close(got.double(), want, rtol=2e-5, atol=2e-5)
    assert not torch.allclose(got, memory)


@pytest.mark.parametrize("kind", ["xbn", "pcxbn"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_in_place_half_precision_adapts_in_fp32_first(kind, dtype, case):
    """Bug caught (mutation testing): with ``out=memory`` in half precision (autocast memories), the
    adapted rows computed straight into the half-precision buffer (the fp32 check inverted), so the
    L2 normalisation runs on rounded values and differs from the out-of-place result."""
    cfg = NormaliserConfig(kind=kind, unit_norm=True, **OPTIONS)
    memory, memory_labels = case.memory(0, dtype)
    batch, batch_labels = case.batch(0, dtype)
    want = build_normaliser(cfg)(memory, memory_labels, batch, batch_labels)
    got = build_normaliser(cfg)(memory, memory_labels, batch, batch_labels, out=memory)
    assert got is memory
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_batch_off_the_memorys_device_is_moved_to_it():
    """Bug caught (mutation testing): the batch's statistics taken on the batch's device instead of the
    memory's (``.to(device=None)``), a device-mismatch crash when the memory lives elsewhere (the
    "meta" device stands in for the GPU)."""
    norm = build_normaliser(NormaliserConfig(kind="xbn"))
    out = norm(torch.randn(5, 3, device="meta"), torch.zeros(5, dtype=torch.long, device="meta"),
               torch.randn(4, 3), torch.zeros(4, dtype=torch.long))
    assert out.device.type == "meta" and out.shape == (5, 3)
