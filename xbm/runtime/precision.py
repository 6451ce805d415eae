"""Matrix products in full fp32 where a result must not depend on the device's fast modes."""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def full_fp32_matmul():
    """fp32 matmuls in full precision inside, whatever :func:`xbm.runtime.device.configure_cuda` allows for
    training (TF32: a 10-bit mantissa). Neighbour searches need it: a squared distance |x|^2 + |y|^2 - 2 x.y of
    unit vectors computed in TF32 is off by ~1e-3, enough to reorder near neighbours; so do the group sums of
    PC-XBN / SC-XBN on a GPU (a one-hot product). A process-wide flag, set and restored on the host: no
    device work, no synchronisation."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)
