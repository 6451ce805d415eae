"""Augmentation presets (config key ``augment``) and input statistics (config key ``normalize``).

A preset gives the training transform, the matching evaluation transform (same geometry and polarity)
and the size images are decoded (and cached) at. Per sample they end in a uint8 tensor: loader workers do
geometry only, batches cross processes and the PCIe bus at a quarter of float32's size, and the
statistics are applied to the whole batch on the training device (:class:`InputNorm`, as timm's
prefetcher does). Registry, one small class per preset:

==============  =====================================================================================
``none``        resize the short side to ``s`` = image_size, centre crop ``s``; the same for evaluation
``shift``       ``none`` + a small random affine: rotation +-10 deg, translation +-8 %, scale 0.9-1.1,
                filled with the background (0); no flip. Characters and digits.
``metric``      random resized crop at scale (0.16, 1) + horizontal flip; evaluation resizes the short
                side to ``s / 0.875`` and centre crops ``s``: the deep-metric-learning standard of the XBM
                paper (seed 002 §4.1) and Musgrave et al., "A Metric Learning Reality Check" (2020)
``randaugment`` timm's pipeline (random resized crop, flip, RandAugment m9 mstd0.5, then random erasing
                0.2 on the normalised batch), evaluation as ``metric``: the thesis's (seed 000 §5.2)
``papers``      the same augmentation built whole by ``timm.data.create_transform`` as the papers ran it
                (AXBN paper §5.1: timm's defaults, ``rand-m9-mstd0.5``, reprob 0.2; thesis §5.2): random
                erasing per sample after timm's own normalisation, so samples leave the workers as float
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
import torch
from torch import nn

from xbm.config import AUGMENT, NORMALIZE
from xbm.registries import AUGMENTS
from xbm.data.style import ImageStyle
from xbm.data.transforms import IMAGENET_MEAN, IMAGENET_STD
EVAL_CROP = 0.875
STATS_SAMPLES = 1024
STATS_SEED = 0


@dataclass(frozen=True)
class Stats:
    """Per-channel ``mean`` and ``std`` of inputs in [0, 1] (None: inputs stay in [0, 1])."""

    mean: Sequence[float]
    std: Sequence[float]


def _tail() -> list:
    from torchvision import transforms as T

    return [T.PILToTensor()]  # uint8 [C, H, W]; InputNorm scales and normalises the batch


class InputNorm(nn.Module):
    """On the batch, on its device: uint8 pixels -> ``(x / 255 - mean) / std`` (``stats`` None: ``x / 255``),
    then ``after`` (e.g. timm's random erasing on the normalised batch). Float inputs pass unchanged."""

    def __init__(self, stats: Optional[Stats], after: Optional[Callable] = None) -> None:
        super().__init__()
        mean = torch.tensor(stats.mean if stats is not None else [0.0], dtype=torch.float32)
        std = torch.tensor(stats.std if stats is not None else [1.0], dtype=torch.float32)
        # x / 255 - mean) / std == x * scale + shift, one fused pass
        self.register_buffer("scale", (1.0 / (255.0 * std)).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("shift", (-mean / std).view(1, -1, 1, 1), persistent=False)
        self.after = after

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.uint8:
            return x
        x = torch.addcmul(self.shift, x.float(), self.scale)
        return self.after(x) if self.after is not None else x


class Preset:
    """Base: evaluation = resize the short side to ``eval_size(s)`` + centre crop ``s``."""

    name = ""

    def load_size(self, image_size: int) -> int:
        """The short side images are decoded at: nothing a transform reads is finer than this."""
        return self.eval_size(image_size)

    def eval_size(self, image_size: int) -> int:
        return image_size

    def eval(self, image_size: int) -> Callable:
        from torchvision import transforms as T

        return T.Compose([T.Resize(self.eval_size(image_size)), T.CenterCrop(image_size), *_tail()])

    def train(self, image_size: int, stats: Optional[Stats], channels: int) -> Callable:
        """Per sample, PIL image -> uint8 tensor (``stats``: only where an op fills with the mean)."""
        raise NotImplementedError

    def batch_train(self, stats: Optional[Stats]) -> nn.Module:
        """On the training batch, on its device."""
        return InputNorm(stats)


class NoAugment(Preset):
    name = "none"

    def train(self, image_size, stats, channels):
        return self.eval(image_size)


class Shift(Preset):
    name = "shift"
    degrees, translate, scale = 10.0, 0.08, (0.9, 1.1)

    def train(self, image_size, stats, channels):
        from torchvision import transforms as T

        return T.Compose([T.Resize(image_size), T.CenterCrop(image_size),
                          T.RandomAffine(self.degrees, translate=(self.translate, self.translate), scale=self.scale,
                                         interpolation=T.InterpolationMode.BILINEAR, fill=0),
                          *_tail()])


class Metric(Preset):
    name = "metric"
    crop_scale = (0.16, 1.0)

    def eval_size(self, image_size):
        return int(math.floor(image_size / EVAL_CROP))

    def train(self, image_size, stats, channels):
        from torchvision import transforms as T

        return T.Compose([T.RandomResizedCrop(image_size, scale=self.crop_scale), T.RandomHorizontalFlip(),
                          *_tail()])


class RandAugment(Metric):
    name = "randaugment"

    erase_probability = 0.2

    def train(self, image_size, stats, channels):
        from timm.data import create_transform

        # timm fills RandAugment's geometric ops with the mean colour; it needs one value per channel
        mean = tuple(stats.mean) if stats is not None else (0.0,) * channels
        return create_transform(image_size, is_training=True, auto_augment="rand-m9-mstd0.5", hflip=0.5,
                                mean=mean, use_prefetcher=True)  # uint8 out: erasing and statistics per batch

    def batch_train(self, stats):
        return InputNorm(stats, BatchErasing(self.erase_probability))


class BatchErasing:
    """timm's random erasing of a normalised batch, as its prefetcher applies it (mode "pixel": N(0, 1)
    pixels), on whatever device the batch is on."""

    def __init__(self, probability: float) -> None:
        from timm.data.random_erasing import RandomErasing

        self.erasing = RandomErasing(probability, mode="pixel", device="cpu")

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.erasing.device = x.device
        return self.erasing(x)


class Papers(RandAugment):
    """timm's training transform exactly as ``create_transform`` composes it for the papers' flags (AXBN paper
    §5.1: "Default data augmentations in the TIMM library ... RandAugment profile rand-m9-mstd0.5, reprob 0.2";
    thesis §5.2): random resized crop, flip, RandAugment, to tensor, normalise, then ``RandomErasing(0.2,
    mode="pixel")`` per sample, timm's order without its prefetcher. ``randaugment`` moves the erasing onto the
    batch to keep uint8 samples; this preset keeps timm's own objects, so what ran is what the papers name.
    Samples are float and already normalised with the run's statistics: :class:`InputNorm` passes them.
    timm applies no colour jitter once RandAugment is on, though the thesis lists colour jitter among the defaults:
    what timm does is what ran."""

    name = "papers"
    auto_augment = "rand-m9-mstd0.5"

    def train(self, image_size, stats, channels):
        from timm.data import create_transform

        mean = tuple(stats.mean) if stats is not None else (0.0,) * channels   # None: inputs stay in [0, 1]
        std = tuple(stats.std) if stats is not None else (1.0,) * channels
        return create_transform(image_size, is_training=True, auto_augment=self.auto_augment, hflip=0.5,
                                re_prob=self.erase_probability, re_mode="pixel", mean=mean, std=std)

    def batch_train(self, stats):
        return InputNorm(stats)   # float samples pass unchanged (erased and normalised per sample)


# one instance of each preset of xbm.registries.AUGMENTS
PRESETS: dict[str, Preset] = {name: AUGMENTS[name]() for name in AUGMENTS}


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
    """Mean and std per channel of ``transform(images(j)) / 255`` (uint8 tensors) over up to
    ``STATS_SAMPLES`` samples drawn with a fixed seed (the same for every trial)."""
    picks = np.random.default_rng(STATS_SEED).permutation(n)[:STATS_SAMPLES]
    x = torch.stack([transform(images(int(j))) for j in np.sort(picks)]).double() / 255.0
    dims = [0, 2, 3]
    std = x.std(dim=dims).clamp_min(1e-6)
    return Stats(tuple(float(v) for v in x.mean(dim=dims)), tuple(float(v) for v in std))
