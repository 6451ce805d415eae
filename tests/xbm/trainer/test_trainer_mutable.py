"""Continuing another run's state with explored values (population-based training):
``Trainer.load_state_dict(state, mutable=...)``."""
import pytest
import torch

from xbm.config import MUTABLE_KEYS

from ..conftest import saved_state


def test_an_explored_run_takes_the_donors_state_and_its_own_values_from_the_next_step(tiny):
    """Bugs caught: an exploit that keeps the exploiting trial's own weights or memory (PBT copying only the
    config), the donor's lambda_mu kept by a normaliser restored from the checkpoint, or the donor's lr put
    back by the optimiser's loaded state (the explored lr never used)."""
    values = {"epochs": 3, "normaliser.kind": "pcxbn", "normaliser.lambda_mu": 0.5, "lr_step": 1, "lr_gamma": 0.5}
    donor = tiny(**values)
    fit = donor.fit()
    next(fit), next(fit)
    explorer = tiny(**{**values, "normaliser.lambda_mu": 0.2, "lr": 2e-3})
    explorer.load_state_dict(saved_state(donor), mutable=("normaliser.lambda_mu", "lr"))
    for name, tensor in donor.model.state_dict().items():
        assert torch.equal(tensor, explorer.model.state_dict()[name]), name
    for name, tensor in donor.xbm.state_dict().items():
        assert torch.equal(tensor, explorer.xbm.state_dict()[name]), name
    # lr 1e-3 halved after each of 2 epochs = 2.5e-4; the explored 2e-3 at the same point of the schedule
    assert donor.optimizer.param_groups[0]["lr"] == pytest.approx(2.5e-4)
    assert explorer.optimizer.param_groups[0]["lr"] == pytest.approx(5e-4)
    seen = []
    normaliser = explorer.xbm.normaliser
    real = type(normaliser).adapt
    normaliser.adapt = lambda *a, **k: seen.append(normaliser.cfg.lambda_mu) or real(normaliser, *a, **k)
    (last,) = list(explorer.fit())
    assert last["epoch"] == 3 and last["lr"] == pytest.approx(5e-4) and seen and set(seen) == {0.2}


def test_only_mutable_keys_may_differ(tiny):
    """Bugs caught: an exploit that silently continues a checkpoint of another memory size or model (its
    state would not fit, or would mean something else), or any key accepted as mutable."""
    donor = tiny(epochs=2)
    next(donor.fit())
    with pytest.raises(ValueError, match=r"memory.ratio \(saved 0.5, now 0.25\)"):
        tiny(**{"epochs": 2, "memory.ratio": 0.25}).load_state_dict(saved_state(donor), mutable=("lr",))
    with pytest.raises(ValueError, match="mutable keys must be among"):
        tiny(epochs=2).load_state_dict(saved_state(donor), mutable=("model",))
    assert "memory.ratio" not in MUTABLE_KEYS and "lr" in MUTABLE_KEYS
