"""The protocol's optimisers and schedule: AdamW at ``lr`` decayed by StepLR, the warm-up's head-only SGD."""
import pytest
import torch

from xbm.training.optim import (WARMUP_LR, WARMUP_MOMENTUM, main_scheduler, scheduler_kwargs,
                                warmup_optimizer)

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
    scheduler = main_scheduler(optimizer, **scheduler_kwargs(tiny_config(lr_step=3, lr_gamma=0.1)))
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
@pytest.mark.usefixtures("cuda_run_settings_restored")   # the CUDA runtime sets TF32 and cuDNN benchmark
def test_cuda_runs_use_fused_adamw_and_sgd(tiny):
    """Bug caught: the CUDA trainer left on the unfused optimisers."""
    trainer = tiny(device="cuda")
    assert trainer.optimizer.param_groups[0]["fused"] and trainer.warmup_optimizer.param_groups[0]["fused"]


def _rates(tiny, **values) -> tuple[list[float], list[float]]:
    """(the lr each main epoch trained with, the lr the metrics reported) over a tiny run."""
    trainer = tiny(**values)
    used: list[float] = []
    real = trainer.train_epoch
    trainer.train_epoch = lambda epoch: used.append(trainer.optimizer.param_groups[0]["lr"]) or real(epoch)
    return used, [m["lr"] for m in trainer.fit()]


@pytest.mark.parametrize("values, expected", [
    # cosine over 5 epochs from 0.01 to min_lr 0.001: 0.001 + 0.009 (1 + cos(pi e / 5)) / 2, e = 0..4
    ({"schedule": "cosine", "min_lr": 0.001},
     [0.01, 0.001 + 0.0045 * (1 + 0.8090169943749475), 0.001 + 0.0045 * (1 + 0.30901699437494745),
      0.001 + 0.0045 * (1 - 0.30901699437494745), 0.001 + 0.0045 * (1 - 0.8090169943749475)]),
    # multistep at main epochs 1 and 3 with gamma 0.5 (lr_step is not read)
    ({"schedule": "multistep", "milestones": "1,3", "lr_step": 1}, [0.01, 0.005, 0.005, 0.0025, 0.0025]),
    # sgd changes the optimiser, not the (step) schedule: decay every 2 epochs
    ({"optimizer": "sgd", "momentum": 0.5, "lr_step": 2}, [0.01, 0.01, 0.005, 0.005, 0.0025]),
    # lr warm-up of 2 epochs: 0.01 * 1/3, 0.01 * 2/3, then the step schedule's own value at e = 2, 3, 4
    ({"warmup_lr_epochs": 2, "lr_step": 2}, [0.01 / 3, 0.02 / 3, 0.005, 0.005, 0.0025]),
    # warm-up then cosine (min_lr 0): the schedule's value at e = 2, 3, 4 (cos(2 pi / 5) = 0.309...), not
    # restarted after the ramp
    ({"warmup_lr_epochs": 2, "schedule": "cosine"},
     [0.01 / 3, 0.02 / 3, 0.005 * (1 + 0.30901699437494745), 0.005 * (1 - 0.30901699437494745),
      0.005 * (1 - 0.8090169943749475)]),
])
def test_lr_per_epoch_follows_the_hand_schedule(tiny, values, expected):
    """Bugs caught: a schedule or the lr warm-up not reaching the optimiser (cosine without its floor, milestones
    counted from 1 or ignored, the warm-up ramp starting at 0 or ending a step late, the schedule restarted after
    the ramp), the scheduler stepped per batch, or the reported lr one epoch ahead. Values by hand, base lr 0.01,
    gamma 0.5, 5 main epochs."""
    used, reported = _rates(tiny, epochs=5, lr=0.01, lr_gamma=0.5, **values)
    assert used == pytest.approx(expected, rel=1e-9) and reported == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("values, kind, group", [
    ({"optimizer": "sgd", "momentum": 0.8, "nesterov": True, "weight_decay": 0.02},
     torch.optim.SGD, {"momentum": 0.8, "nesterov": True, "weight_decay": 0.02}),
    ({"optimizer": "adam", "weight_decay": 0.03}, torch.optim.Adam, {"weight_decay": 0.03}),
    ({"optimizer": "adamw", "weight_decay": 0.04}, torch.optim.AdamW, {"weight_decay": 0.04}),
])
def test_the_optimizer_key_builds_its_optimiser_over_every_parameter(tiny, values, kind, group):
    """Bug caught: ``optimizer`` ignored (AdamW always), SGD without its momentum or Nesterov flag, or Adam
    given AdamW's class (their weight decays differ: L2 in the gradient vs decoupled)."""
    trainer = tiny(lr=3e-3, **values)
    optimizer = trainer.optimizer
    assert type(optimizer) is kind
    assert {id(p) for g in optimizer.param_groups for p in g["params"]} == {id(p) for p in trainer.model.parameters()}
    for name, value in {"lr": 3e-3, **group}.items():
        assert {g[name] for g in optimizer.param_groups} == {value}, name


def test_one_sgd_step_with_momentum_and_weight_decay_is_the_hand_update():
    """Bug caught: the sgd entry built without weight decay or with dampening (a momentum buffer that starts
    at (1 - momentum) g): from zero momentum one step moves w by -lr (g + wd w)."""
    from xbm.training.optim import main_optimizer, optimizer_kwargs

    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0]]))
    config = tiny_config(optimizer="sgd", lr=0.1, momentum=0.9, weight_decay=0.5)
    optimizer = main_optimizer(model, **optimizer_kwargs(config))
    model.weight.grad = torch.tensor([[0.5, 0.25]])
    optimizer.step()
    # w - 0.1 * (g + 0.5 w) = [1 - 0.1 (0.5 + 0.5), -2 - 0.1 (0.25 - 1)] = [0.9, -1.925]
    assert model.weight.detach()[0].tolist() == pytest.approx([0.9, -1.925], rel=1e-6)


def test_the_default_schedule_is_still_step_lr():
    """Bug caught: the default run moved to another scheduler (a resumed checkpoint's StepLR state would no
    longer load, and the numbers of earlier sweeps would change)."""
    params = [torch.nn.Parameter(torch.zeros(1))]
    scheduler = main_scheduler(torch.optim.AdamW(params, lr=1.0), **scheduler_kwargs(tiny_config()))
    assert type(scheduler) is torch.optim.lr_scheduler.StepLR


@pytest.mark.parametrize("values, message", [
    ({"schedule": "multistep", "milestones": "30,20"},
     "milestones must satisfy a comma-separated, strictly increasing"),
    ({"schedule": "multistep", "milestones": "10,10"}, "but got '10,10'"),
    ({"schedule": "multistep"}, "(non-empty with schedule=multistep), but got ''"),
    ({"milestones": "0,5"}, "milestones must satisfy"),
    ({"schedule": "linear"}, "schedule must satisfy one of ['step', 'cosine', 'multistep'], but got 'linear'"),
    ({"optimizer": "lamb"}, "optimizer must satisfy one of ['adamw', 'adam', 'sgd'], but got 'lamb'"),
    ({"optimizer": "adam", "nesterov": True}, "nesterov must satisfy false unless optimizer=sgd with momentum > 0"),
    ({"optimizer": "sgd", "momentum": 0.0, "nesterov": True}, "nesterov must satisfy false unless optimizer=sgd"),
    ({"momentum": 1.0}, "momentum must satisfy 0 <= momentum < 1"),
    ({"schedule": "cosine", "lr": 1e-3, "min_lr": 1e-2}, "min_lr must satisfy 0 <= min_lr <= lr=0.001"),
    ({"min_lr": -1.0}, "min_lr must satisfy"),
    ({"warmup_lr_epochs": -1}, "warmup_lr_epochs must satisfy >= 0"),
])
def test_bad_optimiser_and_schedule_values_name_the_rule(values, message):
    """Bugs caught: milestones out of order (torch's MultiStepLR would silently sort or repeat them), an
    unknown optimiser or schedule falling back to the default, Nesterov without momentum (torch refuses it only
    when the trainer is built), a cosine floor above the base rate (the lr would rise)."""
    with pytest.raises(ValueError) as err:
        tiny_config(**values)
    assert message in str(err.value)


def test_a_lambda_schedule_resumes_from_a_weights_only_checkpoint(tmp_path):
    """Bug caught: the cosine / warm-up schedule's state not surviving a checkpoint (a factor object that
    ``torch.load(weights_only=True)`` refuses, or a resumed run restarting the ramp): the resumed trainer must
    train its next epoch at the uninterrupted run's rate."""
    from xbm.training.checkpoint import load_checkpoint

    from ..conftest import tiny_trainer

    values = {"epochs": 4, "lr": 0.01, "schedule": "cosine", "warmup_lr_epochs": 1}
    full = [m["lr"] for m in tiny_trainer(**values).fit()]
    first = tiny_trainer(**values)
    fit = first.fit()
    next(fit), next(fit)
    torch.save(first.state_dict(), tmp_path / "trainer.pt")
    resumed = tiny_trainer(**values)
    resumed.load_state_dict(load_checkpoint(tmp_path / "trainer.pt"))
    assert [m["lr"] for m in resumed.fit()] == pytest.approx(full[2:], rel=1e-12)
    assert full[0] == pytest.approx(0.005)   # the ramp: 0.01 * 1 / 2


@pytest.mark.parametrize("saved_fused, resumed_fused", [(False, True), (True, False)])
def test_a_checkpoint_resumes_with_this_runs_optimiser_kernels(monkeypatch, saved_fused, resumed_fused):
    """Bug caught: torch's load_state_dict copies the saved group's ``fused`` over this run's, while
    ``_step_supports_amp_scaling`` (read by the step's on-device skip and by GradScaler) keeps the
    constructor's: a CPU checkpoint resumed on CUDA handed ``found_inf`` to the plain kernel, an AssertionError
    at the first step (and retried into the same failure). torch has fused AdamW on the CPU, so this runs
    here with the flag forced."""
    from ..conftest import tiny_trainer
    from xbm.training import optim

    monkeypatch.setattr(optim, "fused", lambda params: saved_fused)
    first = tiny_trainer(epochs=2)
    next(iter(first.fit()))
    state = first.state_dict()
    monkeypatch.setattr(optim, "fused", lambda params: resumed_fused)
    resumed = tiny_trainer(epochs=2)
    resumed.load_state_dict(state)
    assert bool(resumed.optimizer.param_groups[0]["fused"]) == resumed_fused
    assert bool(resumed.warmup_optimizer.param_groups[0]["fused"]) == resumed_fused
    assert [m["epoch"] for m in resumed.fit()] == [2]


def test_a_checkpoint_of_other_parameter_groups_is_refused():
    """Bug caught: loading with this run's kernels zipped the saved groups with this run's and silently
    dropped the extra ones (torch's own load refuses a different number of groups)."""
    from xbm.training.optim import load_optimizer_state

    a, b, c = (torch.nn.Parameter(torch.randn(3)) for _ in range(3))
    saved = torch.optim.AdamW([{"params": [a]}, {"params": [b], "lr": 0.5}]).state_dict()
    with pytest.raises(ValueError, match="2 parameter groups, this run's 1"):
        load_optimizer_state(torch.optim.AdamW([c]), saved)


def test_the_factories_defaults_are_the_configs_and_a_bad_name_lists_the_choices():
    """Bugs caught: a plain-argument factory's default drifting from TrainConfig's (a caller that leaves
    ``momentum``, ``nesterov``, ``min_factor`` or ``warmup_lr_epochs`` out trains otherwise than the same run
    from a config: momentum 0.9 and no Nesterov, a schedule down to 0 with no lr warm-up); and an unknown
    optimiser or schedule refused without naming the choices."""
    import inspect

    from xbm.config import TrainConfig
    from xbm.training.optim import main_optimizer, main_scheduler

    cfg, model = TrainConfig(), torch.nn.Linear(2, 2)
    defaults = inspect.signature(main_optimizer).parameters
    assert (defaults["momentum"].default, defaults["nesterov"].default) == (cfg.momentum, cfg.nesterov)
    group = main_optimizer(model, "sgd", 0.1, 0.0).param_groups[0]
    assert (group["momentum"], group["nesterov"]) == (0.9, False)
    schedule = inspect.signature(main_scheduler).parameters
    assert schedule["min_factor"].default == cfg.min_lr / cfg.lr == 0.0
    assert schedule["warmup_lr_epochs"].default == cfg.warmup_lr_epochs
    cosine = main_scheduler(main_optimizer(model, "sgd", 1.0, 0.0), "cosine", epochs=4, lr_step=1, lr_gamma=1.0)
    assert cosine.get_last_lr() == [1.0]   # no lr warm-up: the first epoch at the full lr
    for _ in range(4):
        cosine.optimizer.step()
        cosine.step()
    assert cosine.get_last_lr() == [pytest.approx(0.0, abs=1e-12)]   # down to min_factor 0
    with pytest.raises(ValueError, match=r"optimizer must be one of \['adamw', 'adam', 'sgd'\], but got 'lamb'"):
        main_optimizer(model, "lamb", 0.1, 0.0)
    with pytest.raises(ValueError, match=r"schedule must be one of \[.*'cosine'.*\], but got 'linear'"):
        main_scheduler(main_optimizer(model, "sgd", 0.1, 0.0), "linear", epochs=4, lr_step=1, lr_gamma=1.0)


def test_rescale_optimizer_moves_every_lr_the_schedule_reads_and_sets_the_weight_decay():
    """Bugs caught (mutants that lived with the fast tests): population-based training's new lr applied to the
    group but not to ``initial_lr`` or the schedule's ``base_lrs`` (the next step jumps back to the old lr),
    ``get_last_lr`` left at the old value, the ratio inverted, or the new weight decay not set."""
    from xbm.training.optim import rescale_optimizer

    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for _ in range(2):
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.025)   # two decays down from 0.1
    rescale_optimizer(optimizer, scheduler, lr=(0.1, 0.4), weight_decay=(0.0, 0.01))
    group = optimizer.param_groups[0]
    assert group["lr"] == pytest.approx(0.1) and group["initial_lr"] == pytest.approx(0.4)
    assert scheduler.base_lrs == [pytest.approx(0.4)] and scheduler.get_last_lr() == [pytest.approx(0.1)]
    assert group["weight_decay"] == 0.01
    optimizer.step()
    scheduler.step()
    assert group["lr"] == pytest.approx(0.05)   # the schedule goes on from the new lr: 0.4 x 0.5^3
    rescale_optimizer(optimizer, scheduler, lr=(0.4, 0.4), weight_decay=(0.01, 0.01))
    assert (group["lr"], group["weight_decay"]) == (pytest.approx(0.05), 0.01)
