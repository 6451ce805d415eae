"""The protocol's optimisers and schedule: AdamW at ``lr`` decayed by StepLR, the warm-up's head-only SGD."""
import pytest
import torch

from xbm.training.optim import WARMUP_LR, WARMUP_MOMENTUM, main_scheduler, warmup_optimizer

from ..conftest import needs_cuda, tiny_config


def test_step_lr_values_and_the_reported_lr_follow_lr_gamma_every_lr_step_epochs(tiny):
    """Bug caught: lr_step or lr_gamma ignored (no decay, or a decay at the wrong epoch), the scheduler
    stepped per batch instead of per epoch, or the ``lr`` metric reporting the next epoch's rate."""
    trainer = tiny(epochs=5, lr=0.01, lr_step=2, lr_gamma=0.5)
    used: list[float] = []
    real = trainer.train_epoch
    trainer.train_epoch = lambda epoch: used.append(trainer.optimizer.param_groups[0]["lr"]) or real(epoch)
    reported = [m["lr"] for m in trainer.fit()]
    # lr_e = 0.01 * 0.5 ** floor(e / 2) for 0-based main epoch e (hand computed)
    expected = [0.01, 0.01, 0.005, 0.005, 0.0025]
    assert reported == pytest.approx(expected, rel=1e-12) and used == pytest.approx(expected, rel=1e-12)


def test_main_scheduler_is_step_lr_with_the_configured_step_and_gamma():
    """Bug caught: a scheduler that ignores lr_step (e.g. the step size hard-coded)."""
    params = [torch.nn.Parameter(torch.zeros(1))]
    optimizer = torch.optim.AdamW(params, lr=1.0)
    scheduler = main_scheduler(optimizer, tiny_config(lr_step=3, lr_gamma=0.1))
    rates = []
    for _ in range(7):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx([1.0, 1.0, 1.0, 0.1, 0.1, 0.1, 0.01])


def test_main_optimizer_is_adamw_over_every_parameter(tiny):
    """Bug caught: the main phase training only part of the model, or with another optimiser/weight decay."""
    trainer = tiny(lr=2e-3, weight_decay=0.03)
    optimizer = trainer.optimizer
    assert isinstance(optimizer, torch.optim.AdamW)
    ids = {id(p) for g in optimizer.param_groups for p in g["params"]}
    assert ids == {id(p) for p in trainer.model.parameters()}
    assert all(g["lr"] == 2e-3 and g["weight_decay"] == 0.03 for g in optimizer.param_groups)


def test_warmup_optimizer_is_sgd_on_the_head_only():
    """Bug caught: a warm-up learning rate of 0 (the warm-up does nothing) or one that reaches the backbone."""
    head = torch.nn.Linear(3, 2)
    optimizer = warmup_optimizer(head)
    assert isinstance(optimizer, torch.optim.SGD) and WARMUP_LR == 1e-3 and WARMUP_MOMENTUM == 0.9
    assert [(g["lr"], g["momentum"]) for g in optimizer.param_groups] == [(1e-3, 0.9)]
    assert [id(p) for g in optimizer.param_groups for p in g["params"]] == [id(p) for p in head.parameters()]
    # One step from zero momentum moves every weight by exactly -lr * grad (hand computation of SGD).
    before = head.weight.detach().clone()
    head.weight.grad = torch.ones_like(head.weight)
    head.bias.grad = torch.ones_like(head.bias)
    optimizer.step()
    assert torch.allclose(head.weight, before - 1e-3)


def test_optimisers_are_fused_only_when_every_parameter_is_on_cuda(tiny):
    """Bugs caught: fused kernels requested on the CPU (on CPU nothing changes: the default implementation),
    or not on CUDA (launch-bound steps, and no step skipped on the device after a NaN loss), or for a model
    only partly on CUDA (fused steps refuse mixed devices)."""
    from xbm.training.optim import fused
    trainer = tiny()
    assert not trainer.optimizer.param_groups[0]["fused"] and not trainer.warmup_optimizer.param_groups[0]["fused"]
    assert not fused([]) and not fused([torch.nn.Parameter(torch.zeros(1))])

    class OnCuda(torch.nn.Parameter):   # the device test alone, without a GPU
        is_cuda = True

    assert fused([OnCuda(torch.zeros(1)), OnCuda(torch.zeros(1))])
    assert not fused([OnCuda(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))])


@needs_cuda
def test_cuda_runs_use_fused_adamw_and_sgd(tiny):
    """Bug caught: the CUDA trainer left on the unfused optimisers."""
    trainer = tiny(device="cuda")
    assert trainer.optimizer.param_groups[0]["fused"] and trainer.warmup_optimizer.param_groups[0]["fused"]
