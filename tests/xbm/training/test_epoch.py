"""One optimiser step of the epoch loop: gradient clipping by norm after unscaling."""
import pytest
import torch

from xbm.training.epoch import Step, run_epoch


def one_step(trainer, clip_grad):
    """Run one main-phase step of ``trainer`` on its first batch; return the gradients it used."""
    batch = next(iter(trainer.loader))
    params = list(trainer.model.parameters())
    step = Step(trainer.model, trainer.objective, trainer.batch_loss, trainer.optimizer, trainer.scaler, params, clip_grad)
    result = run_epoch(step, [batch], trainer.runtime, epoch=1, epoch_index=0)
    assert result.iterations == 1 and result.images == len(batch[1])
    return torch.cat([p.grad.flatten() for p in params])


@pytest.mark.parametrize("clip", [0.05, 0.5])
def test_clip_grad_rescales_the_gradient_to_the_clip_norm(tiny, clip):
    """Bug caught: clip_grad ignored, clipping before unscaling, or clipping per parameter instead of the
    total norm: the step's gradient must be the unclipped one times clip / ||g|| (hand computation)."""
    free = one_step(tiny(), clip_grad=0.0)  # 0 disables clipping; same seed, same weights and batch
    clipped = one_step(tiny(), clip_grad=clip)
    norm = float(free.norm())
    assert norm > clip, "the test needs a gradient larger than the clip norm"
    assert float(clipped.norm()) == pytest.approx(clip, rel=1e-4)
    assert torch.allclose(clipped, free * (clip / norm), atol=1e-7, rtol=1e-4)


def test_a_clip_norm_above_the_gradient_norm_changes_nothing(tiny):
    """Bug caught: clipping that rescales every gradient to the clip norm (growing small ones)."""
    free = one_step(tiny(), clip_grad=0.0)
    loose = one_step(tiny(), clip_grad=float(free.norm()) * 10)
    assert torch.equal(free, loose)


def test_epoch_result_averages_the_loss_over_steps(tiny):
    """Bug caught: the reported loss being the sum, or the last step's, instead of the mean per step."""
    trainer = tiny()
    losses = []
    criterion = trainer.batch_loss

    class Recording(torch.nn.Module):
        last_stats = {}

        def forward(self, *args, **kwargs):
            loss = criterion(*args, **kwargs)
            Recording.last_stats = criterion.last_stats
            losses.append(loss.item())
            return loss

    step = Step(trainer.model, trainer.objective, Recording(), trainer.optimizer, trainer.scaler, list(trainer.model.parameters()), 10.0)
    result = run_epoch(step, trainer.loader, trainer.runtime, epoch=1, epoch_index=0)
    assert result.iterations == len(losses) == 6 and result.images == 6 * 32
    assert result.loss == pytest.approx(sum(losses) / 6, rel=1e-12)
    assert result.pairs["batch_neg_pairs"] > 0 and result.pairs["memory_neg_pairs"] == 0 and result.memory_fill == 0
    assert result.pairs["loss_pos_pairs"] == result.pairs["batch_pos_pairs"] > 0 and not result.collapsed
