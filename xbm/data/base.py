"""What every data set hands the trainer: samples, datasets over them, and the split containers.

A builder (one file per data set) returns a :class:`RawData`: one :class:`~xbm.data.sources.SampleSource`
holding every sample, the builder's own class id per sample, optional super-class ids, and which samples
form the training, query and gallery parts. :func:`xbm.data.splits.assemble` turns it into the
:class:`DatasetSplits` the trainer codes against (global contiguous labels, optional validation classes).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from xbm.data.shared import SharedArray
from xbm.data.sources import SampleSource
from xbm.data.style import PHOTO, ImageStyle
from xbm.data.transforms import default_image_transform


@dataclass
class RawData:
    """A data set as its builder reads it, before relabelling.

    ``labels[j]`` / ``superlabels[j]``: the builder's class / super-class id of sample ``j`` of ``source``
    (non-negative ints). ``train``, ``query``, ``gallery``: sample indices into ``source``; ``gallery`` None
    means leave-one-out retrieval on ``query``.

    Optional, per sample ``j`` as well: ``drawers[j]``, who made it (Omniglot's drawer: one-shot episodes take
    their training and test drawings from two drawers); ``rotations[j]``, the quarter turns a builder applied to
    make new classes (episodes use unrotated samples only, as the real runs have none); ``class_groups[j]``,
    a group whose classes always fall in the same split (a character's rotations). ``superclass_names[s]``
    names super-class id ``s`` (the validation split records the held-out ones by name).
    """

    name: str
    source: SampleSource
    labels: np.ndarray
    train: np.ndarray
    query: np.ndarray
    gallery: Optional[np.ndarray] = None
    superlabels: Optional[np.ndarray] = None
    style: ImageStyle = PHOTO
    drawers: Optional[np.ndarray] = None
    rotations: Optional[np.ndarray] = None
    class_groups: Optional[np.ndarray] = None
    superclass_names: Optional[tuple[str, ...]] = None


class Transforms:
    """How the samples of one :class:`DatasetSplits` become tensors, shared by all its datasets: the
    decoded-image reader ``images`` (``j -> PIL image``, see :mod:`xbm.data.cache`; None: ``source.load``)
    and the (train, eval) transform pair.

    Mutable on purpose: ``DatasetSplits.set_transforms`` swaps both at once for all splits. ``None`` means
    the default plain resize to ``image_size`` + ToTensor + ImageNet normalisation.
    """

    def __init__(self, image_size: int) -> None:
        self.image_size = image_size
        self.train: Optional[Callable] = None
        self.eval: Optional[Callable] = None
        self.images: Optional[Callable] = None
        self._default: Optional[Callable] = None

    def get(self, role: str) -> Callable:
        chosen = self.train if role == "train" else self.eval
        if chosen is not None:
            return chosen
        if self._default is None:
            self._default = default_image_transform(self.image_size)
        return self._default


class SampleDataset(Dataset):
    """Samples ``indices`` of ``source`` with global labels; item ``i`` -> ``(x, label, i)``.

    ``x`` is the decoded image passed through the role's transform, or the raw float vector for vector
    data sets (transforms ignored). ``labels`` (LongTensor) lets samplers and evaluators read the classes
    without decoding any image. Loader workers receive ``indices`` and ``labels`` by shared-memory handle.

    Item ``(i, seed)`` draws the transform's randomness from ``seed`` alone (:func:`seeded`), so an
    augmentation depends on the sampler's seed, never on which worker process made it.
    """

    def __init__(self, source: SampleSource, indices: np.ndarray, labels: np.ndarray,
                 transforms: Transforms, role: str) -> None:
        if len(indices) != len(labels):
            raise ValueError(f"indices and labels must have one entry per sample, but got "
                             f"{len(indices)} indices and {len(labels)} labels")
        self.source = source
        self._indices = SharedArray(np.asarray(indices, dtype=np.int64))
        # An own copy: torch moves a tensor into shared memory in place when a worker receives it, so labels
        # aliasing another tensor (a view of ``dataset.labels.numpy()``) would read freed memory after it moved.
        self.labels = torch.tensor(np.asarray(labels, dtype=np.int64))
        self.transforms = transforms
        self.role = role

    @property
    def indices(self) -> np.ndarray:
        return self._indices.array   # read afresh: rebound when the values move to shared memory

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, item):
        i, seed = item if isinstance(item, tuple) else (item, None)
        if not -len(self) <= i < len(self):
            raise IndexError(f"index {i} out of range for a {self.role} split of {len(self)} samples")
        i = int(i) % len(self)
        j = int(self.indices[i])
        if self.source.input_kind != "image":
            return self.source.load(j), int(self.labels[i]), i
        images = self.transforms.images
        x = images(j) if images is not None else self.source.load(j)
        transform = self.transforms.get(self.role)
        x = transform(x) if seed is None else seeded(int(seed), transform, x)
        return x, int(self.labels[i]), i


def seeded(seed: int, fn: Callable, x):
    """``fn(x)`` with torch's CPU generator, Python's ``random`` and NumPy's global RNG seeded by ``seed``
    (torchvision and timm draw from all three). In the training process the three streams are restored
    afterwards, so the run's own draws never move; a DataLoader worker draws nothing else, and saving
    NumPy's state costs more than the transform, so there they are only seeded."""
    in_worker = get_worker_info() is not None
    if not in_worker:
        states = torch.get_rng_state(), random.getstate(), np.random.get_state()
    torch.default_generator.manual_seed(seed)  # not torch.manual_seed: CUDA generators stay untouched
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        return fn(x)
    finally:
        if not in_worker:
            torch.set_rng_state(states[0])
            random.setstate(states[1])
            np.random.set_state(states[2])


def _identity(x):
    return x


@dataclass
class EvalSplit:
    """Retrieval split: ``query`` against ``gallery``, or leave-one-out on ``query`` when gallery is None.
    ``episodes``: one-shot episodes over ``query``'s positions (:class:`xbm.data.episodes.Episodes`), or None."""

    query: SampleDataset
    gallery: Optional[SampleDataset] = None
    episodes: Optional[object] = None


@dataclass
class DatasetSplits:
    """The trainer's view of a data set (see docs/data.md for the contract).

    Class ids are global and contiguous over every split: training classes ``0..T-1``, then validation
    classes, then test-only classes; ``num_classes`` counts them all. ``superclass_of[c]`` is the
    contiguous super-class id of class ``c`` (None when the data set has no super-classes).
    """

    name: str
    train: SampleDataset
    val: Optional[EvalSplit]
    test: EvalSplit
    superclass_of: Optional[torch.Tensor]
    num_classes: int
    input_kind: str
    input_shape: tuple
    transforms: Transforms
    style: ImageStyle = PHOTO
    augment: str = ""  # the preset in use (xbm.data.images.configure_images)
    statistics: Optional[object] = None  # xbm.data.augment.Stats of the inputs, None: pixels in [0, 1]
    # (train, eval) callables on a batch on its device: uint8 -> normalised float (xbm.data.augment.InputNorm)
    batch_transforms: Optional[tuple] = None
    skipped_images: int = 0  # images left out for on_bad_image=skip (xbm.data.bad_images)
    # images: the evaluation input path as one object (xbm.data.preprocess.Preprocessing); None for vectors
    preprocessing: Optional[object] = None
    # val_by=superclass: the held-out super-classes, by name where the data set names them (recorded per run)
    val_superclasses: tuple[str, ...] = ()

    def batch_transform(self, role: str) -> Callable:
        """What the trainer applies to a batch of ``role`` ("train"/"eval") after moving it to its device:
        identity for vectors."""
        if self.batch_transforms is None:
            return _identity
        return self.batch_transforms[0 if role == "train" else 1]

    @property
    def train_labels(self) -> torch.Tensor:
        """LongTensor [n_train] of training class ids (for PML MPerClassSampler)."""
        return self.train.labels

    @property
    def num_train_classes(self) -> int:
        return int(torch.unique(self.train.labels).numel())

    def set_transforms(self, train_transform: Optional[Callable], eval_transform: Optional[Callable]) -> None:
        """Use ``train_transform`` for the training split and ``eval_transform`` for val/test (None: default).
        Ignored by vector data sets. Call before building DataLoaders (workers copy the datasets)."""
        self.transforms.train = train_transform
        self.transforms.eval = eval_transform
