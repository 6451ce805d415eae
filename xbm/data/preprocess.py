"""The model's input path of an image data set, as one object: decode, evaluation transform, batch statistics.

Training and evaluation read images in three steps, each once defined here:

1. **decode** (:meth:`Preprocessing.decode`): the stored image converted to the data set's mode (``RGB`` or
   ``L``), dark-stroke drawings flipped so that strokes are high (``invert``), the short side shrunk to
   ``load_size`` (never enlarged); files are read as :class:`xbm.data.sources.ImageFileSource` reads them
   (JPEG draft mode when the target is at most half the stored size). :mod:`xbm.data.cache` stores this
   step's output;
2. **evaluation transform** (:meth:`Preprocessing.eval_transform`): the augmentation preset's evaluation
   geometry at ``image_size`` (:mod:`xbm.data.augment`), ending in a uint8 tensor [C, H, W];
3. **batch normalisation** (:meth:`Preprocessing.batch_norm`): on the batch, on its device,
   ``(x / 255 - mean) / std`` (``mean`` None: ``x / 255``), :class:`xbm.data.augment.InputNorm`.

:func:`xbm.data.images.configure_images` builds it from a data set and a config (``DatasetSplits.preprocessing``)
and the trainer's evaluation runs through it; :meth:`Preprocessing.to_dict` is saved with exported weights
(``embedder.yaml``), so that ``xbm.load_embedder`` feeds new images exactly as evaluation did.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np
import torch
from PIL import Image, ImageChops

from xbm.data.augment import PRESETS, InputNorm, Stats
from xbm.errors import BadImageError

IMAGE_MODES = ("RGB", "L")
ImageLike = Union[str, Path, Image.Image, torch.Tensor]


def decode_image(image: Image.Image, mode: str, invert: bool, load_size: int) -> Image.Image:
    """Step 1 on a loaded image: convert to ``mode``, flip the polarity when ``invert``, shrink the short side
    to ``load_size`` (bilinear; never enlarge)."""
    if image.mode != mode:
        image = image.convert(mode)
    if invert:  # 255 - x per band, as ImageOps.invert, in C (ImageOps builds a lookup table per call: 10x slower)
        image = ImageChops.invert(image)
    short = min(image.size)
    if short > load_size:
        w, h = image.size
        image = image.resize((max(1, round(w * load_size / short)), max(1, round(h * load_size / short))),
                             Image.Resampling.BILINEAR)
    return image


@dataclass(frozen=True)
class Preprocessing:
    """``mode`` ("RGB" | "L"), ``invert`` (flip the polarity after decoding), ``load_size`` (short side the
    decode shrinks to), ``preset`` (the augmentation preset whose evaluation geometry is used) at
    ``image_size``, ``mean``/``std`` (per channel, inputs in [0, 1]; None: pixels stay in [0, 1])."""

    mode: str
    invert: bool
    load_size: int
    image_size: int
    preset: str
    mean: Optional[tuple[float, ...]] = None
    std: Optional[tuple[float, ...]] = None

    def __post_init__(self) -> None:
        if self.mode not in IMAGE_MODES:
            raise ValueError(f"preprocessing mode must be one of {list(IMAGE_MODES)}, but got {self.mode!r}")
        if self.preset not in PRESETS:
            raise ValueError(f"preprocessing preset must be one of {sorted(PRESETS)}, but got {self.preset!r}")
        for name in ("load_size", "image_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"preprocessing {name} must be >= 1, but got {getattr(self, name)}")
        if (self.mean is None) != (self.std is None):
            raise ValueError("preprocessing mean and std must be given together (or both None), but got "
                             f"mean={self.mean}, std={self.std}")
        for name in ("mean", "std"):
            value = getattr(self, name)
            if value is not None:
                if len(value) != self.channels:
                    raise ValueError(f"preprocessing {name} must have {self.channels} value(s) for mode "
                                     f"{self.mode!r}, but got {list(value)}")
                object.__setattr__(self, name, tuple(float(v) for v in value))

    @property
    def channels(self) -> int:
        return 1 if self.mode == "L" else 3

    @property
    def stats(self) -> Optional[Stats]:
        return None if self.mean is None else Stats(self.mean, self.std)

    # -- the three steps -------------------------------------------------------------------------------
    def decode(self, image: Image.Image) -> Image.Image:
        """A stored image (as a file holds it) -> the decoded pixels the cache keeps."""
        return decode_image(image, self.mode, self.invert, self.load_size)

    def eval_transform(self) -> Callable[[Image.Image], torch.Tensor]:
        """Decoded PIL image -> uint8 tensor [C, image_size, image_size]."""
        return PRESETS[self.preset].eval(self.image_size)

    def batch_norm(self) -> InputNorm:
        """uint8 batch [N, C, H, W] -> the model's float input (a module: move it to the batch's device)."""
        return InputNorm(self.stats)

    # -- new images --------------------------------------------------------------------------------------
    def open(self, path: Union[str, Path]) -> Image.Image:
        """A file as the data sets read one (RGB, JPEG draft mode towards ``load_size``), not yet decoded.
        Raises :class:`xbm.errors.BadImageError` naming a file that cannot be decoded."""
        from xbm.data.sources import ImageFileSource

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no image file at {path}")
        try:
            return ImageFileSource(path.parent, [path.name], dataset="images").load(0, min_size=self.load_size)
        except BadImageError as exc:  # the data set's wording speaks of data_root and on_bad_image
            cause = exc.__cause__
            raise BadImageError(f"cannot decode image {path}: {type(cause).__name__}: {cause}", str(path)) from cause

    def stored(self, item: ImageLike) -> Image.Image:
        """A path, a PIL image or a uint8 tensor ([H, W] or [C, H, W], C 1 or 3) as a stored image."""
        if isinstance(item, (str, Path)):
            return self.open(item)
        if isinstance(item, Image.Image):
            return item
        if isinstance(item, torch.Tensor):
            if item.dtype != torch.uint8 or item.ndim not in (2, 3) or (item.ndim == 3 and item.shape[0] not in (1, 3)):
                raise ValueError("an image tensor must be uint8 [H, W] or [C, H, W] with C 1 or 3, but got "
                                 f"{item.dtype} {tuple(item.shape)}")
            array = item.cpu().numpy()
            array = array if array.ndim == 2 else (array[0] if array.shape[0] == 1 else np.moveaxis(array, 0, -1))
            return Image.fromarray(np.ascontiguousarray(array), "L" if array.ndim == 2 else "RGB")
        raise ValueError(f"an image must be a file path, a PIL image or a uint8 tensor, but got {type(item).__name__}")

    def pixels(self, item: ImageLike) -> torch.Tensor:
        """One image -> uint8 tensor [C, image_size, image_size] (decode, then the evaluation transform)."""
        return self.eval_transform()(self.decode(self.stored(item)))

    def __call__(self, items: Sequence[ImageLike], device: Union[str, torch.device] = "cpu") -> torch.Tensor:
        """Images -> the model's input batch, float32 [N, C, image_size, image_size] on ``device``, exactly as
        the trainer's evaluation makes it."""
        transform = self.eval_transform()
        batch = torch.stack([transform(self.decode(self.stored(item))) for item in items])
        return self.batch_norm().to(device)(batch.to(device))

    # -- saved with the weights -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ("mean", "std"):
            out[name] = None if out[name] is None else list(out[name])
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Preprocessing":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"preprocessing has unknown keys {unknown}; known: {sorted(known)}")
        values = dict(data)
        for name in ("mean", "std"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls(**values)
