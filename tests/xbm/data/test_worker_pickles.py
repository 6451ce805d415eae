"""What DataLoader workers receive: every data set, whatever its size, pickles small into a spawned or forkserver
worker (ForkingPickler), and loaders give the same batches under fork, spawn and forkserver."""
import pickle
from collections import OrderedDict
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, SequentialSampler

from tests.xbm.data.test_cars196 import make_cars
from tests.xbm.data.test_cifar import make_cifar100
from tests.xbm.data.joined_fixture import Joined
from tests.xbm.data.test_cub200 import make_cub
from tests.xbm.data.test_deepfashion2 import make_deepfashion2
from tests.xbm.data.test_inshop import make_inshop
from tests.xbm.data.test_omniglot import SMALL, make_omniglot_folder, needs_small
from tests.xbm.data.test_sop import make_sop
from tests.xbm.data.test_vehicleid import make_vehicleid
from xbm.data import build_dataset, cache, images
from xbm.objectives.views import TwoViews
from xbm.training.loaders import SeededSampler

# What a worker may receive, whatever the data set's size: half a pipe's 64 KiB. Spawn writes a worker's start data
# (the data set, queues, sampler state) to a pipe that its worker reads only after importing the main module; over
# the pipe's buffer, each worker's start waits for the one before it (timm's 150 KB file list: 15 workers on the
# H100, no batch in 90 s). Ours pickle to about 3 KB.
LIMIT = 32 * 2**10


def _big_cifar10(root, write_image):
    """CIFAR-10's layout with 600 images: 1.8 MB decoded, more than LIMIT (the old code pickled it whole)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": rng.integers(0, 256, (100, 3072), dtype=np.uint8),
                         b"labels": (np.arange(100) % 10).tolist()}, f)
    return {"dataset": "cifar10", "image_size": 32}


def _fixture(make, **values):
    def build(root, write_image):
        make(root, write_image)
        return values
    return build


BUILDERS = {
    "cifar10-big": _big_cifar10,
    "cifar100": _fixture(lambda root, write_image: make_cifar100(root), dataset="cifar100"),
    "cub200": _fixture(make_cub, dataset="cub200"),
    "cars196": _fixture(make_cars, dataset="cars196"),
    "sop": _fixture(make_sop, dataset="sop", val_fraction=0.5),
    "inshop": _fixture(make_inshop, dataset="inshop"),
    "vehicleid": _fixture(make_vehicleid, dataset="vehicleid"),
    "deepfashion2": _fixture(make_deepfashion2, dataset="deepfashion2"),
    "omniglot": _fixture(make_omniglot_folder, dataset="omniglot"),
    "digits": lambda root, write_image: {"dataset": "digits"},
    "toy": lambda root, write_image: {"dataset": "toy"},
}


def _fresh_readers(monkeypatch, where):
    """No reader kept from another test (their keys ignore image_cache); ``disk`` and ``live``: nothing fits in
    memory (``live``: no image_cache either)."""
    monkeypatch.setattr(images, "_kept", OrderedDict())
    if where != "memory":
        monkeypatch.setattr(cache, "MEMORY_BUDGET", 1)


def _cache(tmp_path, where):
    return "" if where == "live" else str(tmp_path / "cache")


def _worker_datasets(splits):
    """Every data set a loader of the run reads: the splits, and the label-free objectives' two views."""
    parts = {"train": splits.train, "query": splits.test.query, "gallery": splits.test.gallery,
             "val": None if splits.val is None else splits.val.query}
    return {**{k: v for k, v in parts.items() if v is not None}, "two views": TwoViews(splits.train)}


READERS = {"memory": cache.PackedImages, "disk": cache.MappedImages, "live": cache.LiveImages}


def _check_small(splits, where):
    if splits.input_kind == "image":
        assert type(splits.transforms.images) is READERS[where], "the reader measured is the one named"
    for name, dataset in _worker_datasets(splits).items():
        data = ForkingPickler.dumps(dataset)
        assert len(data) <= LIMIT, f"{name} pickles to {len(data) / 2**10:.0f} KiB"
        received = ForkingPickler.loads(data)
        for i in (0, len(dataset) - 1):
            x, label, index = received[(i, 7)]
            expected = dataset[(i, 7)]
            assert torch.equal(x, expected[0]) and (label, index) == expected[1:], f"{name} item {i}"


@pytest.mark.parametrize("where", sorted(READERS))
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_every_data_set_reaches_a_worker_small(tmp_path, write_image, config, monkeypatch, name, where):
    """Bug caught: a data set that pickles its pixels (or paths, or indices) into every spawned worker: the
    2.9 GB decoded pack once per worker, 15 workers, and the trainer's rows never reached training; or one over
    the pipe's buffer, whose workers start one after another."""
    _fresh_readers(monkeypatch, where)
    values = BUILDERS[name](tmp_path / "data", write_image)
    cfg = config(data_root=str(tmp_path / "data"), image_cache=_cache(tmp_path, where), **values)
    splits = build_dataset(cfg)
    if name == "cifar10-big" and where == "memory":
        assert splits.transforms.images.nbytes > LIMIT, "the case the old code failed"
    _check_small(splits, where)


@needs_small
@pytest.mark.parametrize("where", sorted(READERS))
def test_omniglot_small_reaches_a_worker_small(tmp_path, config, monkeypatch, where):
    """Bug caught: Omniglot small's every split pickled to 51 MiB at 224 px (the decoded pack rides along)."""
    _fresh_readers(monkeypatch, where)
    splits = build_dataset(config(dataset="omniglot", data_root=str(SMALL), image_size=28, val_fraction=0.2,
                                  image_cache=_cache(tmp_path, where)))
    if where != "live":
        assert splits.transforms.images.nbytes > 3 * LIMIT, "the decoded pixels are more than a worker may receive"
    _check_small(splits, where)


def _batches(dataset, workers, context=None):
    sampler = SeededSampler(SequentialSampler(dataset), seed=3)   # augmentations seeded per item
    loader = DataLoader(dataset, batch_size=8, sampler=sampler, num_workers=workers,
                        multiprocessing_context=context if workers else None)
    return list(loader)   # the labels and indices differ between the sets: a worker's mix-up shows


@pytest.mark.parametrize("context", ["spawn", "forkserver", "fork"])
def test_loaders_give_the_same_batches_under_every_worker_start_method(tmp_path, write_image, config, monkeypatch,
                                                                       context):
    """Bug caught: a worker start method that breaks a loader, or makes it read other pixels: spawn (macOS) and
    forkserver (Linux from Python 3.14) pickle the data set into each worker, fork pickles nothing."""
    _fresh_readers(monkeypatch, "memory")
    packed = build_dataset(config(dataset="digits", image_size=12))   # the in-memory pack
    _fresh_readers(monkeypatch, "disk")
    make_omniglot_folder(tmp_path / "omniglot", write_image)
    mapped = build_dataset(config(dataset="omniglot", data_root=str(tmp_path / "omniglot"), image_size=12,
                                  image_cache=str(tmp_path / "cache")))
    assert isinstance(mapped.transforms.images.pixels, np.memmap)
    both = Joined(packed.train, mapped.train)   # training items: the augmentation runs in the worker
    expected = _batches(both, workers=0)
    for got, want in zip(_batches(both, 2, context), expected, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert packed.transforms.images._pixels.is_shared == (context != "fork")
