"""Devices and precision: AMP resolution, bf16 autocast (available on the CPU), channels_last."""
import math

import pytest
import torch

from xbm.runtime.device import Runtime, resolve_amp

from ..conftest import needs_cuda

CPU = torch.device("cpu")


@pytest.mark.parametrize("amp, dtype", [("off", None), ("auto", None), ("bf16", torch.bfloat16)])
def test_amp_resolution_on_the_cpu(amp, dtype):
    """Bug caught: amp=auto turning on CPU autocast (slower there), or bf16 silently ignored on the CPU."""
    assert resolve_amp(amp, CPU) is dtype


def test_fp16_on_the_cpu_is_refused_with_the_rule():
    """Bug caught: fp16 accepted on the CPU, where no GradScaler path exists."""
    with pytest.raises(ValueError, match="amp must be 'off', 'auto' or 'bf16' on the CPU, but got 'fp16'"):
        resolve_amp("fp16", CPU)


def test_only_fp16_needs_a_grad_scaler():
    """Bug caught: a scaler enabled for bf16 (needless) or disabled for fp16 (gradients underflow)."""
    assert Runtime(CPU, torch.float16, False).needs_scaler
    assert not Runtime(CPU, torch.bfloat16, False).needs_scaler and not Runtime(CPU, None, False).needs_scaler
    assert not Runtime(CPU, torch.bfloat16, False).grad_scaler().is_enabled()


def test_bf16_autocast_runs_matmuls_in_bf16_and_fp32_runs_none():
    """Bug caught: an autocast context that is a no-op (the run would silently stay in fp32)."""
    layer, x = torch.nn.Linear(4, 3), torch.randn(2, 4)
    with Runtime(CPU, torch.bfloat16, False).autocast():
        assert layer(x).dtype is torch.bfloat16
    with Runtime(CPU, None, False).autocast():
        assert layer(x).dtype is torch.float32


def test_a_bf16_run_trains_under_autocast_and_keeps_the_memory_fp32(tiny):
    """Bug caught: amp=bf16 not reaching the training step, or bf16 rows stored in the fp32 memory."""
    trainer = tiny(amp="bf16", epochs=1)
    dtypes = set()
    trainer.model.head.register_forward_hook(lambda m, i, out: dtypes.add(out.dtype) if m.training else None)
    m = next(trainer.fit())
    assert dtypes == {torch.bfloat16}
    assert trainer.xbm.memory.embeddings.dtype is torch.float32 and m["memory_fill"] > 0
    fp32 = next(tiny(epochs=1).fit())
    assert m["loss"] == pytest.approx(fp32["loss"], rel=0.05) and m["loss"] != fp32["loss"]


@pytest.mark.cuda(optional=True)   # on the GPU where there is one (scripts/gpu_check.sh runs it)
@pytest.mark.usefixtures("cuda_run_settings_restored")   # the CUDA runtime sets TF32 and cuDNN benchmark
def test_channels_last_for_image_runs_on_every_device():
    """Bug caught: channels_last left off on the CPU (its NCHW convolutions are 1.1-2.6x slower, module
    docstring) or turned on for vector inputs."""
    assert Runtime.from_config("cpu", "off", image_inputs=True).channels_last
    assert not Runtime.from_config("cpu", "off", image_inputs=False).channels_last
    if torch.cuda.is_available():
        assert Runtime.from_config("cuda", "off", image_inputs=True).channels_last


def test_to_device_makes_image_batches_channels_last_and_leaves_vectors_alone():
    """Bug caught: channels_last runtimes feeding NCHW batches (the NHWC kernels then convert every step)."""
    runtime = Runtime(CPU, None, channels_last=True)
    images = runtime.to_device(torch.randn(2, 3, 5, 5))
    assert images.is_contiguous(memory_format=torch.channels_last) and not images.is_contiguous()
    vectors = torch.randn(2, 7)
    assert runtime.to_device(vectors).is_contiguous()
    plain = Runtime(CPU, None, channels_last=False).to_device(torch.randn(2, 3, 5, 5))
    assert plain.is_contiguous()


def test_the_trainer_puts_an_image_model_in_channels_last_when_the_runtime_says_so(tiny, monkeypatch):
    """Bug caught: the runtime's channels_last flag not applied to the model's weights."""
    monkeypatch.setattr(Runtime, "from_config", classmethod(
        lambda cls, device, amp, images: Runtime(CPU, None, channels_last=images)))
    trainer = tiny(dataset="digits", model="test_resnet", image_size=16, batch_size=20)
    convs = [m.weight for m in trainer.model.backbone.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(w.is_contiguous(memory_format=torch.channels_last) for w in convs)
    # a 3x3 kernel over several channels: NHWC differs from NCHW (digits' first conv sees one grey channel)
    assert not next(w for w in convs if w.shape[1] > 1).is_contiguous()



@needs_cuda
@pytest.mark.usefixtures("cuda_run_settings_restored")   # the CUDA runtime sets TF32 and cuDNN benchmark
@pytest.mark.parametrize("amp", ["auto", "fp16", "bf16"])
def test_amp_on_cuda_trains_in_the_half_type_close_to_fp32_with_the_memory_in_fp32(tiny, amp):
    """Bugs caught: amp=auto not turning autocast on for CUDA (or picking fp16 where bf16 is supported),
    fp16 without loss scaling (the GradScaler disabled) or bf16 with it, half-precision rows stored in the
    memory, or a half-precision run that learns something other than the fp32 run."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(
        amp, torch.bfloat16 if torch.cuda.get_device_capability() >= (8, 0) else torch.float16)
    trainer = tiny(device="cuda", amp=amp, epochs=2)
    assert trainer.runtime.amp_dtype is dtype
    assert trainer.scaler.is_enabled() is (dtype is torch.float16)
    dtypes = set()
    trainer.model.head.register_forward_hook(lambda m, i, out: dtypes.add(out.dtype) if m.training else None)
    half = list(trainer.fit())
    assert dtypes == {dtype}
    assert trainer.xbm.memory.embeddings.dtype is torch.float32 and half[-1]["memory_fill"] > 0
    fp32 = list(tiny(device="cuda", amp="off", epochs=2).fit())
    assert half[-1]["loss"] == pytest.approx(fp32[-1]["loss"], rel=0.05)


@needs_cuda
@pytest.mark.usefixtures("cuda_run_settings_restored")   # the CUDA runtime sets TF32 and cuDNN benchmark
def test_a_cuda_image_run_trains_channels_last_under_autocast():
    """Bugs caught: channels_last on CUDA converting the weights but not the batches (every convolution
    then converts its input), or an image model that fails under CUDA autocast (a timm backbone with a
    fp32-only op)."""
    from xbm.config import TrainConfig
    from xbm.trainer import Trainer

    cfg = TrainConfig.from_dict({"dataset": "digits", "model": "test_resnet", "image_size": 32, "epochs": 1,
                                 "warmup_epochs": 1, "batch_size": 20, "samples_per_class": 4,
                                 "embedding_size": 32, "device": "cuda", "seed": 0})
    trainer = Trainer(cfg)
    assert trainer.runtime.channels_last and trainer.runtime.amp_dtype is not None
    formats = []
    trainer.model.register_forward_pre_hook(
        lambda m, args: formats.append(args[0].is_contiguous(memory_format=torch.channels_last)))
    m = next(trainer.fit())
    assert formats and all(formats)
    assert math.isfinite(m["loss"]) and m["recall_at_1"] > 0.5


def _cuda_flags():
    return (torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)


def _set_cuda_flags(benchmark, matmul, conv_tf32):
    torch.backends.cudnn.benchmark = benchmark
    torch.set_float32_matmul_precision(matmul)
    torch.backends.cudnn.allow_tf32 = conv_tf32


def test_cuda_runs_set_cudnn_benchmark_and_tf32_and_cpu_runs_leave_them(monkeypatch):
    """Bugs caught: cuDNN's benchmark mode or TF32 never switched on for CUDA runs (issue 18: slower
    convolutions and fp32 matmuls), the CPU run changing process-wide settings, or TF32 set through torch's
    newer flags alone, after which ``torch.get_float32_matmul_precision()`` raises ("mix of the legacy and
    new APIs") where inductor's max-autotune reads it to choose a GEMM kernel."""
    saved = _cuda_flags()
    try:
        _set_cuda_flags(False, "highest", False)
        Runtime.from_config("cpu", "auto", image_inputs=True)
        assert _cuda_flags() == (False, "highest", False)
        from xbm.runtime import device as runtime
        monkeypatch.setattr(runtime, "resolve_device", lambda name: torch.device("cuda"))  # no GPU needed to build it
        assert Runtime.from_config("cuda", "off", image_inputs=True).device.type == "cuda"
        assert _cuda_flags() == (True, "high", True)
        assert torch.backends.cuda.matmul.fp32_precision == torch.backends.cudnn.conv.fp32_precision == "tf32"
    finally:
        _set_cuda_flags(*saved)


@pytest.mark.parametrize("capability, dtype", [((7, 5), torch.float16), ((8, 0), torch.bfloat16),
                                               ((9, 0), torch.bfloat16)])
def test_amp_auto_picks_bf16_from_ampere_on_and_fp16_before(monkeypatch, capability, dtype):
    """Bug caught: ``torch.cuda.is_bf16_supported()`` counts emulated bf16 by default, so a T4 or V100
    (compute capability 7.x) trained in emulated bf16, far slower than fp16 on its tensor cores."""
    seen = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: seen.append(device) or capability)
    assert resolve_amp("auto", torch.device("cuda", 1)) is dtype
    assert seen == [torch.device("cuda", 1)]  # the run's device, not the current one


def test_one_device_resolution_for_training_and_embedding(monkeypatch):
    """Bug caught: a second copy (the embedder's) that took ``torch.device`` objects but let ``cuda`` through on a
    machine without CUDA (a RuntimeError deep in ``model.to``, not the rule and the value), or this one refusing
    a ``torch.device``: one ``resolve_device`` takes both, and the embedder uses it."""
    import xbm.evaluate.embedder
    from xbm.runtime.device import resolve_device

    assert xbm.evaluate.embedder.resolve_device is resolve_device
    assert resolve_device(CPU) == CPU and resolve_device("cpu") == CPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == CPU
    for name in ("cuda", "cuda:1", torch.device("cuda", 0)):
        with pytest.raises(ValueError, match=r"device must be available on this machine, but got 'cuda.*CUDA is not"):
            resolve_device(name)
