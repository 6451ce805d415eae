"""Shared fixtures of the tune tests: one local Ray per module, and a toy search-space file."""
from __future__ import annotations

import pytest

TOY_SPACE = """
description: end-to-end test space (toy data; thesis protocol and XBM paper Fig. 1 ratio in miniature)
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 2, warmup_epochs: 0, batch_size: 16,
       samples_per_class: 4, val_fraction: 0.2, device: cpu}
params:
  normaliser.kind: {choice: [none, xbn]}
  memory.ratio: {loguniform: [0.1, 1.0]}
"""


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray with 2 CPUs and no dashboard for the whole test module (starting Ray costs seconds)."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def toy_space(tmp_path):
    """Path of a two-parameter toy space file: a few seconds per trial on CPU."""
    path = tmp_path / "toy.yaml"
    path.write_text(TOY_SPACE)
    return path
