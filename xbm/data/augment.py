"""Augmentation presets (config key ``augment``) and input statistics (config key ``normalize``).

A preset gives the training transform, the matching evaluation transform (same geometry, polarity and
statistics) and the size images are decoded (and cached) at. Registry, one small class per preset:

==============  =====================================================================================
``none``        resize the short side to ``s`` = image_size, centre crop ``s``; the same for evaluation
``shift``       ``none`` + a small random affine: rotation +-10 deg, translation +-8 %, scale 0.9-1.1,
                filled with the background (0); no flip. Characters and digits.
``metric``      random resized crop at scale (0.16, 1) + horizontal flip; evaluation resizes the short
                side to ``s / 0.875`` and centre crops ``s``: the deep-metric-learning standard of the XBM
                paper (seed 002 §4.1) and Musgrave et al., "A Metric Learning Reality Check" (2020)
``randaugment`` timm's pipeline (random resized crop, flip, RandAugment m9 mstd0.5, random erasing 0.2),
                evaluation as ``metric``: the thesis's (seed 000 §5.2)
==============  =====================================================================================

``auto`` is the data set's preset (:class:`xbm.data.style.ImageStyle`). Statistics: ``imagenet`` (timm's
IMAGENET_DEFAULT_MEAN/STD, their channel average for grey images), ``dataset`` (per-channel mean and std of
the training images under the evaluation transform), ``none`` (pixels in [0, 1]); ``auto`` is ImageNet's
for a pretrained backbone and the data set's declared choice otherwise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from xbm.data.style import ImageStyle

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
EVAL_CROP = 0.875
NORMALIZE = ("auto", "imagenet", "dataset", "none")
STATS_SAMPLES = 1024
STATS_SEED = 0


@dataclass(frozen=True)
class Stats:
    """Per-channel ``mean`` and ``std`` of inputs in [0, 1] (None: inputs stay in [0, 1])."""

    mean: Sequence[float]
    std: Sequence[float]


def _tail(stats: Optional[Stats]) -> list:
    from torchvision import transforms as T

    tail = [T.ToTensor()]
    if stats is not None:
        tail.append(T.Normalize(list(stats.mean), list(stats.std)))
    return tail


class Preset:
    """Base: evaluation = resize the short side to ``eval_size(s)`` + centre crop ``s``."""

    name = ""

    def load_size(self, image_size: int) -> int:
        """The short side images are decoded at: nothing a transform reads is finer than this."""
        return self.eval_size(image_size)

    def eval_size(self, image_size: int) -> int:
        return image_size

    def eval(self, image_size: int, stats: Optional[Stats]) -> Callable:
        from torchvision import transforms as T

        return T.Compose([T.Resize(self.eval_size(image_size)), T.CenterCrop(image_size), *_tail(stats)])

    def train(self, image_size: int, stats: Optional[Stats], channels: int) -> Callable:
        raise NotImplementedError


class NoAugment(Preset):
    name = "none"

    def train(self, image_size, stats, channels):
        return self.eval(image_size, stats)


class Shift(Preset):
    name = "shift"
    degrees, translate, scale = 10.0, 0.08, (0.9, 1.1)

    def train(self, image_size, stats, channels):
        from torchvision import transforms as T

        return T.Compose([T.Resize(image_size), T.CenterCrop(image_size),
                          T.RandomAffine(self.degrees, translate=(self.translate, self.translate), scale=self.scale,
                                         interpolation=T.InterpolationMode.BILINEAR, fill=0),
                          *_tail(stats)])


class Metric(Preset):
    name = "metric"
    crop_scale = (0.16, 1.0)

    def eval_size(self, image_size):
        return int(math.floor(image_size / EVAL_CROP))

    def train(self, image_size, stats, channels):
        from torchvision import transforms as T

        return T.Compose([T.RandomResizedCrop(image_size, scale=self.crop_scale), T.RandomHorizontalFlip(),
                          *_tail(stats)])


class RandAugment(Metric):
    name = "randaugment"

    def train(self, image_size, stats, channels):
        from timm.data import create_transform

        mean, std = (stats.mean, stats.std) if stats is not None else ((0.0,) * channels, (1.0,) * channels)
        return create_transform(image_size, is_training=True, auto_augment="rand-m9-mstd0.5", re_prob=0.2,
                                hflip=0.5, mean=tuple(mean), std=tuple(std))


PRESETS: dict[str, Preset] = {p.name: p for p in (NoAugment(), Shift(), Metric(), RandAugment())}
AUGMENT = ("auto", *PRESETS)


def preset(name: str, style: ImageStyle) -> Preset:
    """The preset ``augment=name`` means for a data set of ``style`` (``auto``: the data set's own)."""
    chosen = style.augment if name == "auto" else name
    if chosen not in PRESETS:
        raise ValueError(f"augment must be one of {list(AUGMENT)}, but got {name!r}")
    return PRESETS[chosen]


def statistics_kind(name: str, style: ImageStyle, pretrained: bool) -> str:
    """``imagenet``, ``dataset`` or ``none`` for ``normalize=name``."""
    if name not in NORMALIZE:
        raise ValueError(f"normalize must be one of {list(NORMALIZE)}, but got {name!r}")
    if name != "auto":
        return name
    return "imagenet" if pretrained else style.normalize


def imagenet_stats(channels: int) -> Stats:
    if channels == 3:
        return Stats(IMAGENET_MEAN, IMAGENET_STD)
    return Stats((float(np.mean(IMAGENET_MEAN)),) * channels, (float(np.mean(IMAGENET_STD)),) * channels)


def dataset_stats(images: Callable[[int], object], n: int, transform: Callable) -> Stats:
    """Mean and std per channel of ``transform(images(j))`` (tensors in [0, 1]) over up to
    ``STATS_SAMPLES`` samples drawn with a fixed seed (the same for every trial)."""
    import torch

    picks = np.random.default_rng(STATS_SEED).permutation(n)[:STATS_SAMPLES]
    x = torch.stack([transform(images(int(j))) for j in np.sort(picks)]).double()
    dims = [0, 2, 3]
    std = x.std(dim=dims).clamp_min(1e-6)
    return Stats(tuple(float(v) for v in x.mean(dim=dims)), tuple(float(v) for v in std))
