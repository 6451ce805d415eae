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


@pytest.mark.parametrize("before", [(False, False), (True, True)])
def test_group_sums_on_cuda_run_in_deterministic_mode_and_restore_it(before):
    """Bug caught: PC-XBN / SC-XBN group sums by CUDA's atomic index_add_, whose order differs between GPUs,
    so data-parallel ranks' memories (adapted in place from the sums) drifted apart by rounding; or the
    torch-global mode left switched (every later non-deterministic op then warning), or switched on the CPU."""
    from xbm.normalisers.stats import deterministic_sums

    found = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])
    try:
        with deterministic_sums(torch.device("cuda")):   # sets flags only: runs without a GPU
            assert torch.are_deterministic_algorithms_enabled()
        assert (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) \
            == before
        with deterministic_sums(torch.device("cpu")):
            assert torch.are_deterministic_algorithms_enabled() == before[0]
    finally:
        torch.use_deterministic_algorithms(found[0], warn_only=found[1])   # the mode found, not "off"


def test_group_sums_run_inside_the_deterministic_context(monkeypatch):
    """Bug caught: group_sums no longer entering deterministic_sums (the mode test above would still pass)."""
    from contextlib import contextmanager

    from xbm.normalisers import stats

    entered = []

    @contextmanager
    def recording(device):
        entered.append(device.type)
        yield

    monkeypatch.setattr(stats, "deterministic_sums", recording)
    stats.group_sums(torch.randn(8, 3), torch.tensor([0, 1] * 4), 2)
    assert entered == ["cpu"]


@needs_cuda
def test_cuda_group_sums_are_bit_identical_run_to_run():
    """Bug caught (on a GPU): atomic adds making the same memory's per-class moments differ between runs."""
    from xbm.normalisers.stats import group_sums

    x = torch.randn(60_000, 512, device="cuda")
    ids = torch.randint(0, 10_000, (60_000,), device="cuda")
    first, second = group_sums(x, ids, 10_000), group_sums(x, ids, 10_000)
    assert torch.equal(first.mean, second.mean) and torch.equal(first.m2, second.m2)
