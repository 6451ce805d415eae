"""How a data set's pixels become the model's input: declared by the data set, not by the trainer.

Two kinds of image data need opposite treatment (measured on Omniglot):

- **photos** (SOP, In-Shop, DeepFashion2, CUB, Cars, CIFAR): RGB, ImageNet statistics, the deep metric
  learning augmentation (random resized crop + flip);
- **strokes** (Omniglot, digits): a grey drawing on a plain background. It must enter as foreground high
  and background 0: a white background pushed to about +2.2 by ImageNet statistics made every same-class
  pair fall inside the miner's positive margin, so the loss saw no positive pair and the model collapsed.
  One grey channel (the backbone is built with ``in_chans=1``), normalised by the data set's own
  statistics when the backbone is not pretrained, augmented by small shifts (no flip: a mirrored
  character is another character).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ImageStyle:
    """``mode``: PIL mode of the decoded image ("RGB" or "L"); ``invert``: the stored image is dark
    strokes on a light background (Omniglot's PNGs), flipped so that strokes are high; ``augment``: the
    preset ``augment=auto`` means; ``normalize``: the statistics ``normalize=auto`` means for a backbone
    trained from scratch ("imagenet" or "dataset"); a pretrained backbone always gets ImageNet's."""

    mode: str = "RGB"
    invert: bool = False
    augment: str = "metric"
    normalize: str = "imagenet"

    @property
    def channels(self) -> int:
        return 1 if self.mode == "L" else 3


PHOTO = ImageStyle()
STROKES = ImageStyle(mode="L", invert=False, augment="shift", normalize="dataset")
DARK_STROKES = ImageStyle(mode="L", invert=True, augment="shift", normalize="dataset")
