"""A tiny seeded toy run shared by the trainer-level tests: 24 training classes x 8 samples (192 rows),
batches of 32, so an epoch is 6 steps and a Trainer builds and trains in well under a second."""
import io
import math

import pytest
import torch

from xbm.config import TrainConfig
from xbm.data.splits import assemble
from xbm.data.toy import make_toy
from xbm.trainer import Trainer

TINY = {"dataset": "toy", "model": "mlp", "device": "cpu", "embedding_size": 16, "epochs": 1, "warmup_epochs": 0,
        "lr": 1e-3, "batch_size": 32, "samples_per_class": 4, "seed": 0}
TINY_TRAIN_SAMPLES = 192
# Tests of CUDA paths carry the mark `cuda` (pyproject.toml; scripts/gpu_check.sh runs them alone: pytest -m cuda).
# needs_cuda, the usual case: skipped on CI and on laptops without a GPU, run wherever one is present
# (pytest_runtest_setup below). A test that runs either way, on the GPU when there is one, carries
# pytest.mark.cuda(optional=True).
needs_cuda = pytest.mark.cuda


def pytest_runtest_setup(item):
    mark = item.get_closest_marker("cuda")
    if mark is not None and not mark.kwargs.get("optional") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")


def tiny_config(**values) -> TrainConfig:
    return TrainConfig.from_dict({**TINY, **values})


def tiny_trainer(progress=None, **values) -> Trainer:
    """A Trainer on the tiny toy set (other data sets: their own ``build_dataset``)."""
    cfg = tiny_config(**values)
    splits = None
    if cfg.dataset == "toy":
        splits = assemble(make_toy(num_classes=48, samples_per_class=8), cfg.val_fraction, cfg.image_size,
                          cfg.train_on)
    return Trainer(cfg, splits=splits, progress=progress)


def saved_state(trainer: Trainer) -> dict:
    """``trainer.state_dict()`` through ``torch.save`` and ``torch.load(weights_only=True)``, as a checkpoint."""
    buffer = io.BytesIO()
    torch.save(trainer.state_dict(), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.fixture
def tiny():
    """``tiny(**dotted_values) -> Trainer`` on the tiny toy set."""
    return tiny_trainer


def assert_matches_pml(pml, ours, batches) -> list[float]:
    """Step PML's ``CrossBatchMemory`` (``pml``) and our ``XBMLoss`` (``ours``) through ``batches`` of
    (embeddings, labels): at each step the losses and the gradients agree, and at the end the memories hold
    the same rows. Returns PML's losses (so a caller can check they are not all zero)."""
    values = []
    for step, (emb, labels) in enumerate(batches):
        a, b = emb.clone().requires_grad_(), emb.clone().requires_grad_()
        want, got = pml(a, labels), ours(b, labels, epoch=step)
        want.backward()
        got.backward()
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-7)
        values.append(float(want.detach()))
    # PML's unfilled tail never matters once it wrapped: the valid rows are the comparison
    torch.testing.assert_close(ours.memory.valid().embeddings, pml.embedding_memory, rtol=0, atol=0)
    return values


def assert_same(a, b, where="state"):
    """Nested dicts, lists and tensors equal exactly (NaN equals NaN), naming the first path that differs:
    trainer states and metric histories that must be bit-identical (reuse, resume, rank against rank)."""
    if isinstance(a, dict):
        assert set(a) == set(b), f"{where}: keys {set(a) ^ set(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    else:
        assert same(a, b), f"{where}: {a!r} != {b!r}"


def same(a, b) -> bool:
    """Two plain values equal, NaN equal to NaN (a metric that is NaN in both runs did not differ)."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


class GemmPrecisions(torch.overrides.TorchFunctionMode):
    """Records ``torch.get_float32_matmul_precision()`` at every matrix product run inside it."""

    GEMMS = {"matmul", "__matmul__", "mm", "addmm", "addmm_", "bmm", "cdist"}

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.GEMMS:
            self.seen.append(torch.get_float32_matmul_precision())
        return func(*args, **(kwargs or {}))


def assert_full_fp32_gemms(search) -> None:
    """``search()`` computes its matrix products in full fp32 even where a CUDA run allowed TF32 (the
    precision it sets, "high", is set here; on the CPU it changes nothing else), and leaves "high" behind."""
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        with GemmPrecisions() as mode:
            search()
        assert mode.seen and set(mode.seen) == {"highest"}, mode.seen
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(saved)
