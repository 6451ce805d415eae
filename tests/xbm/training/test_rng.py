"""xbm.training.rng: restoring the CUDA generators' states on a machine that sees fewer GPUs."""
from __future__ import annotations

import torch

from xbm.training import rng


def test_a_state_saved_with_four_gpus_restores_on_a_node_that_sees_one(monkeypatch):
    """Bug caught: ``torch.cuda.set_rng_state_all`` indexes a generator per saved state, so a run saved where
    four GPUs were visible (``xbm-tune train`` on a 4-GPU box) and resumed by a trial given one GPU raised
    IndexError. The visible GPUs get the first saved states, in order."""
    state = rng.rng_state()
    state["cuda"] = [torch.full((4,), i, dtype=torch.uint8) for i in range(4)]
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.extend)
    rng.set_rng_state(state)
    assert [int(s[0]) for s in restored] == [0]
