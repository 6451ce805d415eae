"""The running moments of AXBN / EMA follow the device the embeddings are on.

The "meta" device stands in for a GPU on a CPU-only machine: its kernels refuse operands from another
device as CUDA's do, so a running moment left on the CPU fails here as it would on the first GPU step.
"""
from __future__ import annotations

import pytest
import torch

from xbm.normalisers import NormaliserConfig, build_normaliser


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
