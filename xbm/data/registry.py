"""One registry of data sets: name -> builder ``(cfg) -> RawData``, and :func:`build_dataset`."""
from __future__ import annotations

from typing import Callable

from xbm.data import cars196, cifar, cub200, deepfashion2, digits, inshop, omniglot, sop, toy, vehicleid
from xbm.data.bad_images import without_samples
from xbm.data.base import DatasetSplits, RawData
from xbm.data.cars196 import build_cars196
from xbm.data.cifar import build_cifar10, build_cifar100
from xbm.data.cub200 import build_cub200
from xbm.data.deepfashion2 import build_deepfashion2
from xbm.data.digits import build_digits
from xbm.data.images import configure_images, image_reader
from xbm.data.inshop import build_inshop
from xbm.data.omniglot import build_omniglot
from xbm.data.sop import build_sop
from xbm.data.splits import assemble
from xbm.data.toy import build_toy
from xbm.data.vehicleid import build_vehicleid

DATASETS: dict[str, Callable[..., RawData]] = {
    "sop": build_sop,
    "inshop": build_inshop,
    "vehicleid": build_vehicleid,
    "deepfashion2": build_deepfashion2,
    "cifar10": build_cifar10,
    "cifar100": build_cifar100,
    "cub200": build_cub200,
    "cars196": build_cars196,
    "omniglot": build_omniglot,
    "digits": build_digits,
    "toy": build_toy,
}

# name -> the K of Recall@K its papers report (declared in each data set's file; ``eval_ks`` overrides it)
RECALL_KS: dict[str, tuple[int, ...]] = {
    "sop": sop.RECALL_KS,
    "inshop": inshop.RECALL_KS,
    "vehicleid": vehicleid.RECALL_KS,
    "deepfashion2": deepfashion2.RECALL_KS,
    "cifar10": cifar.RECALL_KS,
    "cifar100": cifar.RECALL_KS,
    "cub200": cub200.RECALL_KS,
    "cars196": cars196.RECALL_KS,
    "omniglot": omniglot.RECALL_KS,
    "digits": digits.RECALL_KS,
    "toy": toy.RECALL_KS,
}


def recall_ks(name: str) -> tuple[int, ...]:
    """The K set of Recall@K data set ``name``'s papers report (``recall_at_K`` for each)."""
    if name not in RECALL_KS:
        raise ValueError(f"dataset must be one of {sorted(RECALL_KS)}, but got {name!r}")
    return RECALL_KS[name]


def build_dataset(cfg, images: bool = True) -> DatasetSplits:
    """Build ``cfg.dataset`` from ``cfg.data_root`` (never downloads) with ``cfg.val_fraction`` of the
    training classes held out for validation, its images decoded and transformed as ``cfg.augment``,
    ``cfg.normalize``, ``cfg.image_size`` and ``cfg.image_cache`` say (:mod:`xbm.data.images`).
    ``images=False`` skips that wiring (no image decoded): enough to check that the data set opens.
    ``cfg.on_bad_image=skip`` drops the images that cannot be decoded before the splits are made.

    Raises ValueError for an unknown name (listing the valid ones) and
    :class:`xbm.errors.DatasetNotFoundError` for a missing root or file.
    """
    if cfg.dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {sorted(DATASETS)}, but got {cfg.dataset!r}")
    raw = DATASETS[cfg.dataset](cfg)
    skipped = 0
    if images and cfg.on_bad_image == "skip" and raw.source.input_kind == "image":
        balanced = cfg.objective == "supervised" and cfg.sampler == "m_per_class"
        per_class = cfg.samples_per_class if balanced else 0  # what the sampler draws
        raw, skipped = without_samples(raw, image_reader(raw.source, raw.style, cfg).skipped, per_class)
    splits = assemble(raw, cfg.val_fraction, cfg.image_size, cfg.train_on, cfg.val_by, cfg.oneshot_episodes)
    splits.skipped_images = skipped
    if images:
        configure_images(splits, cfg)
    return splits
