"""``run_epoch`` with scripted parts (a 2 x 2 linear model, a criterion whose pair counts and memory fill
are set per step), so every field of ``EpochResult`` and the order of a step's calls are checked against
hand computations."""
import math
import time

import pytest
import torch

from xbm.runtime.device import Runtime
from xbm.training.epoch import STAT_NAMES, EpochResult, Step, run_epoch

CPU = Runtime(torch.device("cpu"), None, channels_last=False)
# Three batches of 2, 3 and 1 rows: x, labels, training indices.
BATCHES = [(torch.tensor([[1.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 1]), torch.tensor([5, 6])),
           (torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 1.0]]), torch.tensor([1, 1, 2]), torch.tensor([0, 1, 2])),
           (torch.tensor([[3.0, 1.0]]), torch.tensor([2]), torch.tensor([9]))]
# Per-step pair counts as the criterion reports them; step 2 reports no memory counts at all.
STATS = [{"memory_pos_pairs": 4, "memory_neg_pairs": 10, "batch_pos_pairs": 1, "batch_neg_pairs": 2,
          "loss_pos_pairs": 5, "memory_fill": 0.25},
         {"batch_pos_pairs": 3, "batch_neg_pairs": 6, "loss_pos_pairs": 3, "memory_fill": 0.5},
         {"memory_pos_pairs": 2, "memory_neg_pairs": 5, "batch_pos_pairs": 0, "batch_neg_pairs": 0,
          "loss_pos_pairs": 0, "memory_fill": 0.75}]


class Objective(torch.nn.Module):
    """Supervised-like: embeds the batch (in ``dtype``, as autocast would) and records each after_step,
    with the weights it saw then (after the optimiser's update, before the next step)."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.dtype, self.after = dtype, []

    def forward(self, model, x, y, idx, prepare, runtime):
        return model(prepare(x)).to(self.dtype), y, idx, y > 0

    def after_step(self, model):
        self.after.append((model.weight.detach().clone(), model.weight.grad.detach().clone()))


class Criterion(torch.nn.Module):
    """loss = sum(z^2) / 2 (gradient w.r.t. the weight: sum_i z_i x_i^T); records what it was called with."""

    def __init__(self, stats):
        super().__init__()
        self.stats, self.calls, self.last_stats = stats, [], {}

    def forward(self, z, labels, epoch, indices, enqueue_mask):
        self.calls.append((z.dtype, labels.clone(), epoch, indices.clone(), enqueue_mask.clone()))
        self.last_stats = self.stats[len(self.calls) - 1]
        return z.square().sum() / 2


def run(dtype=torch.float32, batches=BATCHES, lr=0.1, stats=STATS):
    model = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    objective, criterion = Objective(dtype), Criterion(stats)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    step = Step(model, objective, criterion, optimizer, torch.amp.GradScaler("cpu", enabled=False),
                list(model.parameters()), clip_grad=0.0, prepare=lambda x: 2 * x)
    return run_epoch(step, batches, CPU, epoch=3, epoch_index=2), objective, criterion


def hand_steps(lr=0.1):
    """Plain SGD on loss = |W 2x|^2 / 2 per batch: each step's loss, gradient and weights after it."""
    w = torch.eye(2, dtype=torch.float64)
    out = []
    for x, _, _ in BATCHES:
        x = 2 * x.double()
        z = x @ w.T
        grad = z.T @ x                      # d/dW of sum(z^2)/2 with z = x W^T
        loss = float(z.square().sum() / 2)
        w = w - lr * grad
        out.append((loss, grad, w.clone()))
    return out


def test_the_result_holds_the_mean_loss_and_pair_counts_the_images_and_the_last_fill():
    """Bugs caught: the loss or pair counts summed, or taken from the last step, instead of the mean per
    step; a pair count missing from a step's stats not counted as 0; images counted as batches; the fill
    of the first step instead of the last; the epoch index or the training indices not passed on."""
    result, _, criterion = run()
    losses = [loss for loss, _, _ in hand_steps()]
    assert result.iterations == 3 and result.images == 6
    assert result.loss == pytest.approx(sum(losses) / 3, rel=1e-6)
    assert result.pairs == pytest.approx({"memory_pos_pairs": 2.0, "memory_neg_pairs": 5.0, "batch_pos_pairs": 4 / 3,
                                          "batch_neg_pairs": 8 / 3, "loss_pos_pairs": 8 / 3,
                                          "valid_neg_memory": 0.0, "valid_neg_batch": 0.0})
    assert set(result.pairs) == set(STAT_NAMES)
    assert result.memory_fill == 0.75 and isinstance(result.memory_fill, float)
    assert [c[2] for c in criterion.calls] == [2, 2, 2]
    assert [c[3].tolist() for c in criterion.calls] == [[5, 6], [0, 1, 2], [9]]
    assert [c[1].tolist() for c in criterion.calls] == [[0, 1], [1, 1, 2], [2]]
    assert [c[4].tolist() for c in criterion.calls] == [[False, True], [True, True, True], [True]]
    assert 0 < result.seconds < 60 and result.images_per_s == pytest.approx(6 / result.seconds)
    assert not result.collapsed


def test_one_step_reports_that_steps_loss_and_counts_and_no_fill_when_the_criterion_reports_none():
    """Bugs caught: the means divided by at least 2 steps (or any floor above 1), and a memory fill that
    defaults to anything but 0 when the criterion reports none (no memory in that phase)."""
    no_fill = {name: 2 for name in STAT_NAMES}
    result, _, _ = run(batches=BATCHES[:1], stats=[no_fill])
    assert result.iterations == 1 and result.images == 2
    assert result.loss == pytest.approx(hand_steps()[0][0], rel=1e-6)
    assert result.pairs == dict.fromkeys(STAT_NAMES, 2.0) and result.memory_fill == 0.0


def test_every_step_uses_its_own_gradient_and_after_step_sees_the_updated_weights():
    """Bugs caught: gradients not zeroed between steps (they accumulate: step 2 would use g1 + g2), the
    optimiser or scaler step skipped, or ``after_step`` (MoCo's EMA) called before the update or not
    once per step."""
    _, objective, _ = run()
    assert len(objective.after) == 3
    for (weight, grad), (_, want_grad, want_weight) in zip(objective.after, hand_steps()):
        torch.testing.assert_close(grad.double(), want_grad, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(weight.double(), want_weight, rtol=1e-6, atol=1e-6)


def test_the_criterion_gets_fp32_embeddings_from_a_half_precision_forward():
    """Bug caught: the loss computed on autocast's bf16/fp16 embeddings (``z.float()`` dropped), where
    SupCon's exp/log of similarities / temperature lose most of their digits."""
    _, _, criterion = run(dtype=torch.bfloat16)
    assert [c[0] for c in criterion.calls] == [torch.float32] * 3


def test_an_empty_loader_reports_nan_loss_and_zero_counts_and_has_not_collapsed():
    """Bugs caught: a division by zero iterations, a loss of 0 reported for an epoch that did not train,
    or an empty epoch called collapsed (no step happened, so no positive pair was missing)."""
    result, objective, _ = run(batches=[])
    assert math.isnan(result.loss) and result.iterations == 0 and result.images == 0
    assert result.pairs == dict.fromkeys(STAT_NAMES, 0.0) and result.memory_fill == 0.0
    assert not result.collapsed and objective.after == []


@pytest.mark.parametrize("iterations, loss_pos_pairs, collapsed", [(3, 0.0, True), (3, 0.5, False), (0, 0.0, False)])
def test_collapsed_means_no_positive_pair_reached_the_loss_in_an_epoch_that_ran(iterations, loss_pos_pairs,
                                                                                  collapsed):
    """Bug caught: ``collapsed`` read from another count, or true for an epoch with no step."""
    pairs = {**dict.fromkeys(STAT_NAMES, 1.0), "loss_pos_pairs": loss_pos_pairs}
    result = EpochResult(loss=0.0, images=0, iterations=iterations, seconds=1.0, pairs=pairs, memory_fill=0.0)
    assert result.collapsed is collapsed


def test_images_per_second_is_nan_without_elapsed_time():
    """Bug caught: a ZeroDivisionError (or inf) for an epoch timed at 0 s."""
    pairs = dict.fromkeys(STAT_NAMES, 0.0)
    assert math.isnan(EpochResult(1.0, 10, 1, 0.0, pairs, 0.0).images_per_s)
    assert EpochResult(1.0, 10, 1, 4.0, pairs, 0.0).images_per_s == 2.5


class Poisoned(Criterion):
    """``Criterion`` whose loss is NaN at the ``bad``-th call (1-based)."""

    def __init__(self, stats, bad):
        super().__init__(stats)
        self.bad = bad

    def forward(self, *args, **kwargs):
        loss = super().forward(*args, **kwargs)
        return loss * float("nan") if len(self.calls) == self.bad else loss


def run_poisoned(bad, fused):
    """The scripted epoch with a NaN loss at step ``bad``; plain SGD, fused (skips on the device) or not."""
    from xbm.errors import NonFiniteLossError
    model = torch.nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))
    objective, criterion = Objective(), Poisoned(STATS, bad)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, fused=fused)
    step = Step(model, objective, criterion, optimizer, torch.amp.GradScaler("cpu", enabled=False),
                list(model.parameters()), clip_grad=1e3, prepare=lambda x: 2 * x)
    with pytest.raises(NonFiniteLossError) as info:
        run_epoch(step, BATCHES, CPU, epoch=3, epoch_index=2)
    return info.value, model, objective, criterion, optimizer


@pytest.mark.parametrize("fused", [False, True], ids=["checked before backward", "skipped on the device"])
@pytest.mark.parametrize("bad", [1, 2, 3])
def test_a_nan_loss_names_its_step_and_never_reaches_the_weights(bad, fused):
    """Bugs caught: a NaN step that updates the weights (the fused optimiser not handed the flag, or the flag
    inverted), a later step that updates them before the error, the error naming the step where it was
    noticed (one late, on the device path) instead of the bad one, or a NaN in the last step never raised
    (the check one step late needs a last look at the epoch's end)."""
    error, model, objective, criterion, optimizer = run_poisoned(bad, fused)
    assert (error.epoch, error.iteration) == (3, bad) and math.isnan(error.value)
    want = torch.eye(2, dtype=torch.float64) if bad == 1 else hand_steps()[bad - 2][2]
    torch.testing.assert_close(model.weight.detach().double(), want, rtol=1e-6, atol=1e-6)
    # Checked before backward: the bad step stops at once. On the device: its update is skipped, and the
    # error comes while the next step is queued (forward done, nothing applied), or at the epoch's end.
    assert len(criterion.calls) == (bad if not fused else min(bad + 1, len(BATCHES)))
    assert len(objective.after) == (bad - 1 if not fused else bad)
    assert ("found_inf" in vars(optimizer)) is False   # the flag is not left behind


def test_the_device_path_is_taken_only_by_fused_optimisers_without_loss_scaling():
    """Bug caught: ``found_inf`` handed to a non-fused optimiser (its step asserts it is None) or set next
    to fp16's GradScaler, which hands the fused optimiser its own inf flag and would drop ours."""
    from xbm.training.epoch import skips_on_device
    params = [torch.nn.Parameter(torch.zeros(2))]

    def step(optimizer, scaling):
        return Step(None, None, None, optimizer, torch.amp.GradScaler("cpu", enabled=scaling), params, 0.0)

    assert skips_on_device(step(torch.optim.AdamW(params, fused=True), False))
    assert skips_on_device(step(torch.optim.SGD(params, lr=0.1, fused=True), False))
    assert not skips_on_device(step(torch.optim.AdamW(params), False))
    assert not skips_on_device(step(torch.optim.AdamW(params, fused=True), True))


class SlowLoader:
    """The scripted batches, each handed out after ``delay`` seconds (a loader the GPU would wait for)."""

    def __init__(self, delay):
        self.delay = delay

    def __iter__(self):
        for batch in BATCHES:
            time.sleep(self.delay)
            yield batch


def test_data_wait_is_the_time_spent_in_the_loaders_next():
    """Bugs caught: ``data_wait_s`` not measured (0), measured around the whole step (it would include the
    training), or outside the epoch's wall time. Sleeps of 0.1 s per batch: at least 0.3 s waited, and never
    more than the pass took; on this machine the 3 scripted steps take far less than the waits."""
    def step():
        model = torch.nn.Linear(2, 2, bias=False)
        return Step(model, Objective(), Criterion(STATS), torch.optim.SGD(model.parameters(), lr=0.1),
                    torch.amp.GradScaler("cpu", enabled=False), list(model.parameters()), 0.0, lambda x: 2 * x)

    result = run_epoch(step(), SlowLoader(0.1), CPU, epoch=1, epoch_index=0)
    assert result.iterations == 3
    assert 0.3 <= result.data_wait_s <= result.seconds
    fast = run_epoch(step(), BATCHES, CPU, epoch=1, epoch_index=0)
    assert fast.data_wait_s < 0.3 and fast.data_wait_s <= fast.seconds
