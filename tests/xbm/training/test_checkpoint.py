"""``xbm.training.checkpoint.load_checkpoint``: a trainer's saved state comes back; a bad file is named."""
import pickle

import pytest
import torch

from xbm.training.checkpoint import load_checkpoint
from xbm.errors import BadCheckpointError

from ..conftest import tiny_trainer


def test_a_saved_state_round_trips(tmp_path):
    """Bug caught: the loader dropping weights_only's safety or mapping tensors off the CPU, so a state a
    trainer wrote no longer restores."""
    trainer = tiny_trainer()
    list(trainer.fit())
    torch.save(trainer.state_dict(), tmp_path / "trainer.pt")
    state = load_checkpoint(tmp_path / "trainer.pt")
    assert state["epoch"] == 1 and state["model"]["head.weight"].device.type == "cpu"
    resumed = tiny_trainer()
    resumed.load_state_dict(state)
    assert torch.equal(resumed.model.head.weight, trainer.model.head.weight)


def test_a_truncated_checkpoint_is_named(tmp_path):
    """Bug caught: a truncated checkpoint (a node died while writing) failing with torch's
    "PytorchStreamReader failed reading zip archive", which says nothing of which trial's file is bad."""
    path = tmp_path / "trainer.pt"
    torch.save(tiny_trainer().state_dict(), path)
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(BadCheckpointError) as info:
        load_checkpoint(path)
    assert f"cannot read checkpoint {path}: " in str(info.value) and info.value.path == str(path)
    assert str(pickle.loads(pickle.dumps(info.value))) == str(info.value)  # Ray ships it between processes


def test_a_missing_checkpoint_stays_a_file_not_found(tmp_path):
    """Bug caught: a missing file reported as corrupt (the user would inspect a file that is not there)."""
    with pytest.raises(FileNotFoundError, match="trainer.pt"):
        load_checkpoint(tmp_path / "trainer.pt")
