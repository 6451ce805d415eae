"""The normaliser base class: it owns the flow, each kind fills one hook.

Flow of ``norm(memory, memory_labels, batch, batch_labels, epoch=e)`` (all kinds):

1. check shapes; return an unchanged copy while ``epoch < delay_epochs`` (thesis, seed 000, §4.3.3),
   for kind "none", or when the memory or the batch has fewer than 2 rows (the Bessel-corrected
   standard deviation of fewer than 2 rows is undefined, so no statistics are valid);
2. cast to fp32 under ``no_grad`` (under autocast embeddings arrive as fp16/bf16);
3. ``adapt`` (the hook of the group kinds) or ``target_moments`` (the hook of the global kinds) maps
   the memory rows ``z`` with the affine map of the XBN family (AXBN paper, seed 001, Eq. 6)

       z' = (z - E_src) / sigma_src * sigma_tgt + E_tgt            (elementwise, per dimension)

   or, with ``centre_only`` (thesis Eq. 4.5), ``z' = z - E_src + E_tgt`` (no scaling);
4. ``unit_norm`` (thesis §4.3.5): the adapted rows are L2-normalised;
5. the result is a new tensor in the memory's dtype; the inputs are never modified. Optionally
   ``out=`` (same shape and dtype) receives it instead; ``out=memory`` adapts in place, which
   ``XBMLoss`` uses so that no second [N, d] tensor is allocated per step.

On a GPU, the kinds marked ``graphable`` (PC-XBN, SC-XBN: stateless, and bound by their launches) run
steps 2-5 of an ``out=`` call as a replay of one CUDA graph once their inputs stop changing (``graphed.py``);
the values are the eager path's.

E and sigma are per-dimension means and standard deviations (``stats.py``); sigma uses Bessel's
correction (torch's default) and is floored at ``eps``.
"""
from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from xbm.normalisers import stats
from xbm.normalisers.config import NormaliserConfig
from xbm.normalisers.graphed import GraphedCall
from xbm.normalisers.stats import Moments, moments


def affine_params(src: Moments, tgt: Moments) -> tuple[Tensor | None, Tensor]:
    """``(a, b)`` with ``z' = z * a + b`` equal to ``(z - E_src) / sigma_src * sigma_tgt + E_tgt``:
    a = sigma_tgt / sigma_src, b = E_tgt - E_src * a; centre-only (``src.std`` None): a = None,
    b = E_tgt - E_src."""
    if src.std is None:
        return None, tgt.mean - src.mean
    scale = tgt.std / src.std
    return scale, tgt.mean - src.mean * scale


def affine(z: Tensor, src: Moments, tgt: Moments, out: Tensor) -> Tensor:
    """Write the XBN map of every row of ``z`` [n, d] into ``out`` (may be ``z``) in one fused pass."""
    scale, shift = affine_params(src, tgt)
    if scale is None:
        return torch.add(z, shift, out=out)
    return torch.addcmul(shift, z, scale, out=out)


def grouped_affine(z: Tensor, scale: Tensor | None, shift: Tensor, group: Tensor, out: Tensor) -> Tensor:
    """Row i of ``out`` (may be ``z``) = z_i * scale[group_i] + shift[group_i] (scale None: 1), chunked."""
    step = stats.chunks(z)
    for part, ids, dest in zip(z.split(step), group.split(step), out.split(step)):
        if scale is None:
            torch.add(part, shift.index_select(0, ids), out=dest)
        else:
            torch.addcmul(shift.index_select(0, ids), part, scale.index_select(0, ids), out=dest)
    return out


def normalise_rows_(x: Tensor, rows: Tensor | None) -> None:
    """L2-normalise in place the rows of ``x`` selected by the bool mask ``rows`` (None: all), as
    ``F.normalize``: x / max(||x||, 1e-12)."""
    parts = x.split(stats.chunks(x))
    masks = rows.split(stats.chunks(x)) if rows is not None else (None,) * len(parts)
    for part, mask in zip(parts, masks):
        norm = torch.linalg.vector_norm(part, dim=1, keepdim=True).clamp_min_(1e-12)
        part.div_(norm if mask is None else torch.where(mask.unsqueeze(1), norm, 1.0))


class Normaliser(nn.Module):
    """Base of every kind: ``forward`` is the flow above; subclasses override ``target_moments``
    (one transform for all rows) or ``adapt`` (per-group transforms)."""

    kind: ClassVar[str] = ""
    needs_superclasses: ClassVar[bool] = False
    graphable: ClassVar[bool] = False

    def __init__(self, cfg: NormaliserConfig) -> None:
        super().__init__()
        if not isinstance(cfg, NormaliserConfig):
            raise ValueError(f"cfg must be a NormaliserConfig, but got {type(cfg).__name__}")
        self.cfg = cfg
        # A kind whose call is a pure function of its inputs replays it as a CUDA graph on a GPU when called
        # with ``out=`` (graphed.py); None: always eager.
        self.graphs: GraphedCall | None = GraphedCall() if self.graphable else None

    def active(self, epoch: int) -> bool:
        """Whether this call adapts: not during the first ``delay_epochs`` epochs (thesis §4.3.3)."""
        return epoch >= self.cfg.delay_epochs

    def forward(self, memory: Tensor, memory_labels: Tensor, batch: Tensor, batch_labels: Tensor,
                epoch: int = 0, out: Tensor | None = None) -> Tensor:
        """The adapted memory: a new tensor, or ``out`` (same shape and dtype as ``memory``; it may be
        ``memory`` itself, to adapt in place without allocating a second [N, d] tensor)."""
        _check_shapes(memory, memory_labels, batch, batch_labels, out)
        with torch.no_grad():
            if not self.active(epoch) or memory.shape[0] < 2 or batch.shape[0] < 2:
                return memory.detach().clone() if out is None else out.copy_(memory)
            memory_labels, batch_labels = memory_labels.to(memory.device), batch_labels.to(memory.device)
            if out is not None and self.graphs is not None and self.graphs.handles(memory):
                buffers = tuple(b.data_ptr() for b in self.buffers())
                self.graphs(self._write_adapted, memory.detach(), memory_labels, batch.detach(), batch_labels, out,
                            (self.cfg, buffers))
                return out
            return self._write_adapted(memory.detach(), memory_labels, batch.detach(), batch_labels, out)

    def _write_adapted(self, memory: Tensor, memory_labels: Tensor, batch: Tensor, batch_labels: Tensor,
                       out: Tensor | None) -> Tensor:
        """Steps 2-5 of the flow (the labels already on the memory's device)."""
        z = memory.float()
        zb = batch.to(device=z.device, dtype=torch.float32)
        result = out if out is not None and out.dtype == torch.float32 else torch.empty_like(z)
        rows = self.adapt(z, memory_labels, zb, batch_labels, result)
        if self.cfg.unit_norm:
            normalise_rows_(result, rows)
        if out is None:
            return result.to(memory.dtype)
        return out if result is out else out.copy_(result)

    def adapt(self, z: Tensor, labels: Tensor, zb: Tensor, batch_labels: Tensor, out: Tensor) -> Tensor | None:
        """Hook: write the adapted rows of ``z`` [N, d] (fp32) into ``out`` (fp32, may be ``z``:
        compute every statistic before writing) and return which rows were adapted (a bool mask,
        or None for all). Default: one transform with whole-memory source moments and the kind's
        ``target_moments``."""
        src = moments(z, self.cfg.eps, with_std=not self.cfg.centre_only)
        affine(z, src, self.target_moments(moments(zb, self.cfg.eps), zb.shape[0]), out)
        return None

    def target_moments(self, batch: Moments, batch_size: int) -> Moments:
        """Hook of the global kinds: the target moments given the current batch's moments."""
        raise NotImplementedError(f"{type(self).__name__} must implement target_moments or adapt")

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, cfg={self.cfg}"


class StatefulNormaliser(Normaliser):
    """A normaliser whose running moments ``mu_hat``/``sigma_hat`` [d] start empty (d is known at the
    first call) and are resized when a state_dict is loaded.

    Scalar state (the call count here, AXBN's filter) lives on the host and is mirrored into buffers for
    the checkpoint: reading a GPU buffer with ``int()`` would make the CPU wait for the GPU every step. The
    buffers are read once, when a state_dict is loaded."""

    def __init__(self, cfg: NormaliserConfig) -> None:
        super().__init__(cfg)
        self.register_buffer("mu_hat", torch.zeros(0))
        self.register_buffer("sigma_hat", torch.zeros(0))
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        self._calls = 0

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for name in ("mu_hat", "sigma_hat"):
            if prefix + name in state_dict:
                incoming = state_dict[prefix + name]
                self._buffers[name] = torch.empty_like(incoming, device=self._buffers[name].device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if prefix + "calls" in state_dict:   # read from the checkpoint's tensor (the module may be on "meta")
            self._calls = int(state_dict[prefix + "calls"])

    def _start(self, batch: Moments) -> int:
        """The 0-based call number; on the first call the running moments become the batch's."""
        calls = self._calls
        if self.mu_hat.device != batch.mean.device:   # e.g. loaded on CPU, used on CUDA
            self.mu_hat, self.sigma_hat = self.mu_hat.to(batch.mean.device), self.sigma_hat.to(batch.mean.device)
        if calls == 0:
            self.mu_hat = batch.mean.clone()
            self.sigma_hat = batch.std.clone()
        self._calls = calls + 1
        self.calls.fill_(self._calls)   # a host int: a fill, no read-back
        return calls


def _check_shapes(memory: Tensor, memory_labels: Tensor, batch: Tensor, batch_labels: Tensor,
                  out: Tensor | None) -> None:
    if memory.dim() != 2 or batch.dim() != 2 or memory.shape[1] != batch.shape[1]:
        raise ValueError("memory [N, d] and batch [B, d] must be 2-D with the same d, but got "
                         f"memory {tuple(memory.shape)} and batch {tuple(batch.shape)}")
    if memory_labels.shape != memory.shape[:1] or batch_labels.shape != batch.shape[:1]:
        raise ValueError("labels must be 1-D with one label per row, but got memory_labels "
                         f"{tuple(memory_labels.shape)} for memory {tuple(memory.shape)} and batch_labels "
                         f"{tuple(batch_labels.shape)} for batch {tuple(batch.shape)}")
    if out is not None and (out.shape != memory.shape or out.dtype != memory.dtype or out.device != memory.device):
        raise ValueError("out must match memory's shape, dtype and device, but got "
                         f"{tuple(out.shape)} {out.dtype} {out.device} for memory {tuple(memory.shape)} "
                         f"{memory.dtype} {memory.device}")
