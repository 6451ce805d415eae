"""xbm/data/checks.py: a run's data set opened on the launching machine, and the live-decode warning."""
from __future__ import annotations

import pytest

from xbm.config import TrainConfig
from xbm.data import cache
from xbm.data.checks import check_inputs, live_decode_warning
from xbm.errors import DatasetNotFoundError


def test_check_inputs_names_the_missing_file(tmp_path):
    """Bug: a missing data set or weights file found only inside a trial; the check must raise the data
    set's own layout error and name the file."""
    with pytest.raises(DatasetNotFoundError, match="Expected this official layout"):
        check_inputs(TrainConfig(dataset="omniglot", data_root=str(tmp_path / "none")))
    with pytest.raises(FileNotFoundError, match="pretrained_path must name an existing state-dict file.*w.pth"):
        check_inputs(TrainConfig(dataset="toy", pretrained_path=str(tmp_path / "w.pth")))
    check_inputs(TrainConfig(dataset="toy"))  # no files needed


def test_a_data_set_over_the_memory_budget_without_a_cache_is_named_with_its_decode_rate(monkeypatch, tmp_path):
    """Bug caught: a GPU sweep over CUB/SOP decoding every JPEG every epoch (140-460 images/s) in silence; or
    the warning given although image_cache is set or the images fit in memory."""
    digits = {"dataset": "digits", "model": "test_resnet"}
    assert live_decode_warning(TrainConfig.from_dict(digits), cpus=4) is None  # fits in memory
    monkeypatch.setattr(cache, "MEMORY_BUDGET", 1000)
    text = live_decode_warning(TrainConfig.from_dict(digits), cpus=4)
    assert "image_cache" in text and "429 images/s with 3 loader worker(s)" in text
    assert live_decode_warning(TrainConfig.from_dict({**digits, "image_cache": str(tmp_path)}), cpus=4) is None
    assert live_decode_warning(TrainConfig.from_dict({"dataset": "toy", "model": "mlp"}), cpus=4) is None
