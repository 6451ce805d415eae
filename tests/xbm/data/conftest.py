"""Fixtures for the data-layer tests: tiny images and the contract every DatasetSplits must honour."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from xbm.config import TrainConfig


def _write_image(path: Path, size=(12, 10), value: int = 0, mode: str = "RGB") -> Path:
    """A tiny image whose pixels encode ``value`` (so tests can tell images apart after loading)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    array = np.full((size[1], size[0], 3), value % 256, dtype=np.uint8)
    array[0, 0] = (value // 256) % 256
    Image.fromarray(array).convert(mode).save(path)
    return path


@pytest.fixture
def write_image():
    return _write_image


@pytest.fixture
def config():
    def make(**values) -> TrainConfig:
        return TrainConfig.from_dict({"image_size": 16, **values})
    return make


def _labels(split):
    parts = [split.query.labels] + ([] if split.gallery is None else [split.gallery.labels])
    return torch.cat(parts)


def _check_splits(splits, *, class_disjoint_test: bool = True):
    """The trainer's contract: items (x, label, i), contiguous global labels, consistent super-classes."""
    train = splits.train_labels
    assert train.dtype == torch.long and len(train) == len(splits.train)
    assert torch.equal(train.unique(), torch.arange(int(train.max()) + 1)), "training classes are 0..T-1"
    all_labels = [train, _labels(splits.test)] + ([] if splits.val is None else [_labels(splits.val)])
    assert torch.equal(torch.cat(all_labels).unique(), torch.arange(splits.num_classes))
    if splits.val is not None:
        val = set(_labels(splits.val).tolist())
        assert val.isdisjoint(train.tolist()) and splits.val.gallery is None
        assert min(val) == int(train.max()) + 1, "validation classes follow the training classes"
    if class_disjoint_test:
        assert set(_labels(splits.test).tolist()).isdisjoint(train.tolist())
    if splits.test.gallery is not None:
        assert set(splits.test.query.labels.tolist()) <= set(splits.test.gallery.labels.tolist())
    if splits.superclass_of is not None:
        sup = splits.superclass_of
        assert sup.dtype == torch.long and len(sup) == splits.num_classes
        assert torch.equal(sup.unique(), torch.arange(int(sup.max()) + 1)), "super-classes are contiguous"
    datasets = [splits.train, splits.test.query, splits.test.gallery]
    datasets += [] if splits.val is None else [splits.val.query]
    for dataset in (d for d in datasets if d is not None):
        for i in (0, len(dataset) - 1):
            x, label, index = dataset[i]
            assert index == i and isinstance(label, int) and label == int(dataset.labels[i])
            assert isinstance(x, torch.Tensor) and tuple(x.shape) == tuple(splits.input_shape)
            if splits.input_kind == "image":  # uint8 per sample; statistics applied to the batch
                assert x.dtype == torch.uint8
                assert splits.batch_transform(dataset.role)(x[None]).dtype == torch.float32
            else:
                assert x.dtype == torch.float32
    assert splits.input_kind in ("image", "vector")


@pytest.fixture
def check_splits():
    return _check_splits


def make_drawings(root: Path, alphabets=("Alpha", "Beta"), characters: int = 4, drawers: int = 4) -> list[Path]:
    """An Omniglot-layout folder of 24x24 random 1-bit drawings (large enough that a truncated file is
    detectably truncated), in scan order: <root>/images_evaluation/<alphabet>/characterNN/NN_DD.png."""
    rng = np.random.default_rng(0)
    paths = []
    for alphabet in alphabets:
        for c in range(1, characters + 1):
            for d in range(1, drawers + 1):
                path = root / "images_evaluation" / alphabet / f"character{c:02d}" / f"{c:02d}_{d:02d}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray((rng.random((24, 24)) > 0.7).astype(np.uint8) * 255).convert("1").save(path)
                paths.append(path)
    return paths


def truncate(path: Path) -> Path:
    """Keep the first 60% of ``path``'s bytes: PIL then fails with "image file is truncated"."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 6 // 10])
    return path
