"""Where and in which precision a run computes: device ``auto`` (CUDA when available, else CPU), AMP
(``auto``: bf16 on CUDA devices that support it, fp16 on older ones, off on the CPU), channels_last for
image models on every device (NHWC convolutions run faster on tensor cores, and on the CPU oneDNN's NHWC
kernels: ResNet50 at 224 px trained 1.55x and evaluated 2.6x faster on 2 cores, ResNet18 at 32 px 1.1x /
1.3x; a ViT, whose only convolution is its patch embedding, is unchanged), and on CUDA cuDNN's benchmark
mode and TF32 (:func:`configure_cuda`)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch


def resolve_device(name: str | torch.device) -> torch.device:
    """``auto``: CUDA when available, else the CPU; any other name (or a ``torch.device``) as it is. A CUDA device
    on a machine without CUDA is a ValueError naming it (the training's config and an embedder's ``--device``)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device must be available on this machine, but got {str(name)!r} and CUDA is not; "
                         "use device=auto or device=cpu")
    return device


def resolve_amp(amp: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for fp32. CPU autocast is slower than fp32 for these models, hence off
    under ``auto``; ``bf16`` may still be forced there, fp16 may not (CPU has no GradScaler path)."""
    if amp == "off" or (amp == "auto" and device.type != "cuda"):
        return None
    if amp == "auto":  # bf16 in hardware from Ampere (compute capability 8.0) on; before it torch emulates
        # bf16 (is_bf16_supported() says True there by default), much slower than fp16 on the tensor cores
        return torch.bfloat16 if torch.cuda.get_device_capability(device) >= (8, 0) else torch.float16
    if device.type != "cuda" and amp == "fp16":
        raise ValueError(f"amp must be 'off', 'auto' or 'bf16' on the CPU, but got {amp!r}")
    return torch.float16 if amp == "fp16" else torch.bfloat16


def configure_cuda() -> None:
    """The process's CUDA settings for training speed (the CPU's are left alone):

    - ``cudnn.benchmark``: cuDNN times its convolution algorithms once per input shape and keeps the
      fastest (batches have one shape; evaluation's last batch adds one more);
    - TF32 for fp32 matmuls and convolutions (tensor cores, 10-bit mantissa; under AMP the bf16/fp16
      parts are coarser anyway, and the loss and the memory stay fp32 elementwise)."""
    torch.backends.cudnn.benchmark = True
    # The long-standing setters, which set torch's newer per-backend flags too. Setting only the newer
    # flags (``matmul.fp32_precision = "tf32"``) leaves ``torch.get_float32_matmul_precision()`` raising
    # ("mix of the legacy and new APIs"), and inductor reads it to pick GEMM kernels (compile=max-autotune).
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True


@dataclass(frozen=True)
class Runtime:
    """Device, autocast dtype (None = fp32) and memory format of one run."""

    device: torch.device
    amp_dtype: torch.dtype | None
    channels_last: bool

    @classmethod
    def from_config(cls, device: str, amp: str, image_inputs: bool) -> "Runtime":
        dev = resolve_device(device)
        if dev.type == "cuda":
            configure_cuda()
        return cls(dev, resolve_amp(amp, dev), channels_last=image_inputs)

    @property
    def needs_scaler(self) -> bool:
        """fp16 needs loss scaling; bf16 has fp32's exponent range and needs none."""
        return self.amp_dtype is torch.float16

    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()  # cheaper than a disabled autocast on every step
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def to_device(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.device, non_blocking=True)
        if self.channels_last and x.ndim == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def synchronize(self) -> None:
        """Wait for the training stream, which times a pass: work on other streams (a checkpoint's transfer to
        the host, xbm.training.host_buffers) runs beside the pass and is not waited for."""
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()

    def grad_scaler(self) -> torch.amp.GradScaler:
        return torch.amp.GradScaler(self.device.type, enabled=self.needs_scaler)
