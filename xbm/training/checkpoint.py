"""Reading a saved ``Trainer.state_dict()`` (checkpoint.pt) so that a bad file is named."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from xbm.errors import BadCheckpointError


def load_checkpoint(path) -> dict[str, Any]:
    """The state in ``path``, read with ``weights_only=True`` (the trainer's state is tensors and plain
    values, xbm.training.rng) onto the CPU. A missing file raises FileNotFoundError; a truncated or corrupt
    one :class:`BadCheckpointError` naming it (torch's own errors, e.g. "PytorchStreamReader failed reading
    zip archive", do not)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise BadCheckpointError(path, f"{type(exc).__name__}: {exc}") from exc
