"""``sync_bn``: BatchNorm over the global batch of a data-parallel run.

``torch.nn.SyncBatchNorm`` runs on CUDA only (its kernels ``batch_norm_stats`` & co. have no CPU version,
and it refuses CPU inputs). On CUDA the model gets it; on the CPU (gloo workers, the tests) its layers become
:class:`GlooSyncBatchNorm`, the same statistics from two differentiable all-reduces:

    mean = sum_r sum_i x_ri / n,    var = sum_r sum_i (x_ri - mean)^2 / n     (n = rows of every rank, per channel)
    y = (x - mean) / sqrt(var + eps) * weight + bias
    running_mean <- (1 - m) running_mean + m mean,  running_var <- (1 - m) running_var + m var n / (n - 1)

as ``F.batch_norm`` computes them on the concatenated batch. The sums go through
``torch.distributed.nn.functional.all_reduce``, whose backward all-reduces the gradient: each rank's rows get
the gradient through the global statistics from every rank's loss, as in SyncBatchNorm's backward.
Both keep BatchNorm's parameters and buffers, so state dicts load either way.
``GlooSyncBatchNorm`` is kept for CPU tensors: on CUDA the model has torch's own.

timm's norm + activation layers (``BatchNormAct2d``: EfficientNet, MobileNetV3, RegNet, DenseNet, CSPNet) are
BatchNorm subclasses that apply their activation in ``forward``. Torch's own conversion turns them into a plain
``SyncBatchNorm`` whose ``forward`` drops it (DenseNet-121's outputs then differed by up to 666), so the
conversion is timm's, into ``SyncBatchNormAct`` (:class:`GlooSyncBatchNormAct` on the CPU).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.nn.functional import all_reduce
from torch.nn.modules.batchnorm import _BatchNorm


class GlooSyncBatchNorm(_BatchNorm):
    """BatchNorm of any input rank whose training statistics are those of every rank's rows (see the module
    docstring); in eval mode or without a process group of several ranks, plain BatchNorm. Not an
    ``nn.SyncBatchNorm`` subclass: DDP refuses those on the CPU."""

    process_group = None

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2-D input (N, C, ...), but got {input.dim()}-D")

    def forward(self, input: Tensor) -> Tensor:
        syncing = (self.training and dist.is_available() and dist.is_initialized()
                   and dist.get_world_size(self.process_group or dist.group.WORLD) > 1)
        if not syncing:
            return super().forward(input)
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        group = self.process_group or dist.group.WORLD
        dims = [0] + list(range(2, input.dim()))
        count = torch.tensor([float(input.numel() // input.shape[1])], dtype=input.dtype)
        total = all_reduce(torch.cat([input.sum(dims), count]), group=group)
        n = total[-1]
        mean = total[:-1] / n
        shape = [1, -1] + [1] * (input.dim() - 2)
        centred = input - mean.view(shape)
        var = all_reduce(centred.square().sum(dims), group=group) / n
        if self.track_running_stats:
            with torch.no_grad():
                self.running_mean.mul_(1 - factor).add_(mean.detach(), alpha=factor)
                self.running_var.mul_(1 - factor).add_(var.detach() * (n / (n - 1)), alpha=factor)
        out = centred * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out


class GlooSyncBatchNormAct(GlooSyncBatchNorm):
    """:class:`GlooSyncBatchNorm`, then the dropout and activation of the timm ``BatchNormAct2d`` it replaces
    (as timm's ``SyncBatchNormAct`` applies them after ``nn.SyncBatchNorm``)."""

    def forward(self, input: Tensor) -> Tensor:
        return self.act(self.drop(super().forward(input)))


def convert_sync_batchnorm(model: nn.Module, device: torch.device) -> nn.Module:
    """Every BatchNorm layer of ``model`` as a synchronised one (in place where possible; returns the model):
    ``nn.SyncBatchNorm`` (timm's ``SyncBatchNormAct`` for its norm + activation layers) on CUDA,
    :class:`GlooSyncBatchNorm` (:class:`GlooSyncBatchNormAct`) elsewhere."""
    from timm.layers import SyncBatchNormAct
    from timm.layers import convert_sync_batchnorm as timm_convert

    model = timm_convert(model)
    if device.type != "cuda":
        cpu_classes = {nn.SyncBatchNorm: GlooSyncBatchNorm, SyncBatchNormAct: GlooSyncBatchNormAct}
        for module in model.modules():
            if type(module) in cpu_classes:
                module.__class__ = cpu_classes[type(module)]
    return model


def count_sync_batchnorm(model: nn.Module) -> int:
    """How many synchronised BatchNorm layers ``model`` holds."""
    return sum(isinstance(m, (nn.SyncBatchNorm, GlooSyncBatchNorm)) for m in model.modules())
