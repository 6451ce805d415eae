"""Builders shared by the export, embed and retrieve tests: a small image Trainer and its export folder."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from xbm.config import TrainConfig
from xbm.evaluate.embedder import write_export
from xbm.trainer import Trainer

from tests.xbm.data.conftest import make_drawings

MLP = {"model": "mlp", "image_size": 16, "embedding_size": 8, "batch_size": 8, "samples_per_class": 4,
       "device": "cpu", "num_workers": "0", "epochs": 1, "warmup_epochs": 0, "seed": 0}


def omniglot_mlp_trainer(root: Path, **values) -> Trainer:
    """An mlp on the Omniglot drawing fixture (grey, inverted), weights moved off their init."""
    make_drawings(root)
    trainer = Trainer(TrainConfig.from_dict({**MLP, "dataset": "omniglot", "data_root": str(root), **values}))
    torch.manual_seed(1)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return trainer


def export_trainer(trainer: Trainer, folder: Path) -> Path:
    cfg = trainer.cfg
    return write_export(folder, trainer.model.state_dict(), model=cfg.model, embedding_size=cfg.embedding_size,
                        input_shape=trainer.splits.input_shape, preprocessing=trainer.splits.preprocessing,
                        provenance={"run": "test"}, config=cfg.to_dict())


def class_folder(root: Path, classes: int = 3, per_class: int = 3, seed: int = 0) -> list[Path]:
    """``root/<class>/<image>.png``: 24x24 grey drawings, different per image."""
    rng = np.random.default_rng(seed)
    paths = []
    for c in range(classes):
        for i in range(per_class):
            path = root / f"class{c}" / f"img{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(((rng.random((24, 24)) > 0.6) * 255).astype(np.uint8)).save(path)
            paths.append(path)
    return paths
