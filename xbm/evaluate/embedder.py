"""A trained model as a self-contained image embedder: the export folder, ``load_embedder``, ``embed``.

The export folder (written by :func:`write_export`, read by :func:`load_embedder`; torch and timm only, no Ray):

- ``weights.safetensors``: the embedding model's ``state_dict`` (backbone + head), nothing else;
- ``embedder.yaml``: ``format``, ``model``, ``embedding_size``, ``input_shape`` [C, H, W], ``preprocessing``
  (:class:`xbm.data.preprocess.Preprocessing`: decode, evaluation transform, statistics), ``provenance``
  (where the weights came from: sweep, stage, trial, run, epoch, metric, value, git sha) and ``config``
  (the training run's full ``TrainConfig``, for reference);
- ``README.md``: what the folder holds and how to use it.

``embed`` feeds images exactly as the trainer's evaluation does (decode, evaluation transform, batch
statistics; fp32 on the CPU, autocast on CUDA as ``amp=auto`` trains) and returns L2-normalised
float32 rows [N, d].
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import torch

from xbm.config import ON_BAD_IMAGE
from xbm.data.preprocess import ImageLike, Preprocessing
from xbm.errors import BadImageError
from xbm.runtime.device import resolve_amp, resolve_device

EXPORT_FORMAT = 1
WEIGHTS, CARD, README = "weights.safetensors", "embedder.yaml", "README.md"
EXPORT_FILES = (WEIGHTS, CARD, README)
REQUIRED = (WEIGHTS, CARD)  # README is for people
BATCH_SIZE = 64


class ExportFolderError(FileNotFoundError):
    """An export folder that lacks a file or holds an unreadable ``embedder.yaml`` (exit 2 in the CLI)."""


def write_export(folder: Union[str, Path], model_state: Mapping[str, torch.Tensor], *, model: str,
                 embedding_size: int, input_shape: Sequence[int], preprocessing: Preprocessing,
                 provenance: Mapping[str, Any], config: Mapping[str, Any]) -> Path:
    """Write the three files of an export folder (module docstring); returns the folder."""
    import yaml
    from safetensors.torch import save

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # bytes written as the other files are (safetensors' save_file creates it readable by its owner only,
    # and an export folder is for handing on)
    (folder / WEIGHTS).write_bytes(save({k: v.detach().cpu().contiguous() for k, v in model_state.items()}))
    card = {"format": EXPORT_FORMAT, "model": model, "embedding_size": int(embedding_size),
            "input_shape": [int(v) for v in input_shape], "preprocessing": preprocessing.to_dict(),
            "provenance": dict(provenance), "config": dict(config)}
    (folder / CARD).write_text(yaml.safe_dump(card, sort_keys=False))
    (folder / README).write_text(_readme(card))
    return folder


def _readme(card: Mapping[str, Any]) -> str:
    prov = card["provenance"]
    where = ", ".join(f"{k} {v}" for k, v in prov.items() if v is not None)
    prep = card["preprocessing"]
    return f"""# Image embedder: {card['model']}, {card['embedding_size']} dimensions

From: {where}.

- `weights.safetensors`: the model's weights (backbone and linear head; the output is L2-normalised).
- `embedder.yaml`: the model, the input preprocessing (mode {prep['mode']}, invert {prep['invert']}, decoded at
  short side {prep['load_size']}, evaluation preset `{prep['preset']}` at {prep['image_size']} px, mean {prep['mean']},
  std {prep['std']}), where the weights came from, and the training config.

Use it (torch and timm suffice; no Ray):

```python
import xbm
embedder = xbm.load_embedder("THIS_FOLDER")
z = embedder.embed(["a.jpg", "b.png"])   # float32 [2, {card['embedding_size']}], rows of norm 1
```

or `xbm-tune embed THIS_FOLDER --images FOLDER --out embeddings.parquet` and
`xbm-tune retrieve THIS_FOLDER --gallery FOLDER --query FOLDER --k 5`.
"""


def read_card(folder: Union[str, Path]) -> dict[str, Any]:
    """``embedder.yaml`` of an export folder, after checking that the folder holds every required file."""
    import yaml

    folder = Path(folder)
    if not folder.is_dir():
        raise ExportFolderError(f"the export folder {folder} does not exist; write one with xbm-tune export")
    missing = [name for name in REQUIRED if not (folder / name).is_file()]
    if missing:
        raise ExportFolderError(f"the export folder {folder} lacks {', '.join(missing)} (an export holds "
                                f"{', '.join(EXPORT_FILES)}); export it again with xbm-tune export")
    try:
        card = yaml.safe_load((folder / CARD).read_text())
    except yaml.YAMLError as exc:
        raise ExportFolderError(f"{folder / CARD} is not valid YAML: {exc}") from None
    keys = ("format", "model", "embedding_size", "input_shape", "preprocessing")
    if not isinstance(card, dict) or any(k not in card for k in keys):
        raise ExportFolderError(f"{folder / CARD} must hold the keys {list(keys)}; export it again")
    if card["format"] != EXPORT_FORMAT:
        raise ExportFolderError(f"{folder / CARD} has format {card['format']!r}, this version reads {EXPORT_FORMAT}")
    return card


def load_embedder(folder: Union[str, Path], device: str = "auto") -> "ImageEmbedder":
    """The embedder of an export folder (module docstring), its model in eval mode on ``device``.

    Args:
        folder: an export folder (``xbm-tune export``): ``embedder.yaml`` and the weights beside it.
        device: ``auto`` (CUDA when present), ``cpu``, ``cuda`` or ``cuda:N``.

    Returns:
        An :class:`ImageEmbedder` that preprocesses images as the run's evaluation did.

    Raises:
        FileNotFoundError: the folder, its card or its weights are missing.
        ValueError: the card is not one this version reads, or ``device`` names CUDA on a machine without it.
    """
    from safetensors.torch import load_file

    from xbm.config import TrainConfig
    from xbm.models import create_embedding_model, model_kwargs

    card = read_card(folder)
    cfg = TrainConfig.from_dict({"model": card["model"], "embedding_size": card["embedding_size"],
                                 "pretrained": False})
    model = create_embedding_model(**model_kwargs(cfg), input_shape=tuple(card["input_shape"]))
    model.load_state_dict(load_file(str(Path(folder) / WEIGHTS)))
    return ImageEmbedder(model, Preprocessing.from_dict(card["preprocessing"]), device,
                         provenance=card.get("provenance") or {})


@dataclass
class Embedded:
    """One batch of :meth:`ImageEmbedder.batches`: ``rows`` float32 [n, d] (CPU) of the items at ``positions``
    of the input; ``skipped``: (position, reason) of the batch's items that could not be decoded."""

    positions: list[int]
    rows: torch.Tensor
    skipped: list[tuple[int, str]]


class ImageEmbedder:
    """``model`` (an :class:`xbm.models.EmbeddingModel`) behind its data set's ``preprocessing``."""

    def __init__(self, model: torch.nn.Module, preprocessing: Preprocessing, device: str = "auto",
                 provenance: Optional[Mapping[str, Any]] = None) -> None:
        self.model = model.eval()
        self.preprocessing = preprocessing
        self.provenance = dict(provenance or {})
        self.device = resolve_device(device)
        self.model.to(self.device)
        self.norm = preprocessing.batch_norm()

    @property
    def embedding_size(self) -> int:
        return int(self.model.head.out_features)

    def _to(self, device: Union[str, torch.device]) -> torch.device:
        device = resolve_device(device)
        if device != self.device:
            self.model.to(device)
            self.device = device
        return device

    @torch.no_grad()
    def batches(self, images: Sequence[ImageLike], batch_size: int = BATCH_SIZE, device: str = "auto",
                on_error: str = "stop") -> Iterator[Embedded]:
        """Embed ``images`` ``batch_size`` at a time. ``on_error``: ``stop`` raises
        :class:`xbm.errors.BadImageError` naming an image that cannot be decoded; ``skip`` leaves it out
        and names it in the batch's ``skipped``."""
        if on_error not in ON_BAD_IMAGE:  # the training's choices for an image that cannot be decoded
            raise ValueError(f"on_error must be one of {list(ON_BAD_IMAGE)}, but got {on_error!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, but got {batch_size}")
        device = self._to(device)
        amp = resolve_amp("auto", device)  # as amp=auto trains: autocast on CUDA, fp32 on the CPU
        norm = self.norm.to(device)
        for start in range(0, len(images), batch_size):
            positions, pixels, skipped = [], [], []
            for i in range(start, min(start + batch_size, len(images))):
                try:
                    pixels.append(self.preprocessing.pixels(images[i]))
                except BadImageError as exc:
                    if on_error == "stop":
                        raise
                    skipped.append((i, str(exc)))
                    continue
                positions.append(i)
            if not pixels:
                yield Embedded(positions, torch.zeros(0, self.embedding_size), skipped)
                continue
            x = norm(torch.stack(pixels).to(device))
            if amp is None:
                z = self.model(x)
            else:
                with torch.autocast(device.type, dtype=amp):
                    z = self.model(x)
            # the model's output is normalised in the autocast dtype; renormalise in fp32 (a no-op within rounding)
            z = torch.nn.functional.normalize(z.float(), dim=1) if amp is not None else z.float()
            yield Embedded(positions, z.cpu(), skipped)

    def embed(self, images: Union[ImageLike, Sequence[ImageLike]], batch_size: int = BATCH_SIZE,
              device: str = "auto") -> torch.Tensor:
        """File paths, PIL images or uint8 tensors ([H, W] or [C, H, W]; one, a list, or a uint8 batch
        [N, C, H, W]) -> L2-normalised
        float32 [N, d] on the CPU. A path is read as the data sets read files (JPEG draft mode towards the
        decode size); a PIL image or tensor is taken as a file's full-size content. Raises
        :class:`xbm.errors.BadImageError` naming an image that cannot be decoded."""
        if isinstance(images, torch.Tensor) and images.ndim == 4:  # a uint8 batch [N, C, H, W]
            images = list(images)
        elif not isinstance(images, (list, tuple)):
            images = [images]
        rows = [b.rows for b in self.batches(images, batch_size, device)]
        return torch.cat(rows) if rows else torch.zeros(0, self.embedding_size)


def embed_files(embedder: ImageEmbedder, paths: list[str], batch_size: int, device: str, on_error: str,
                desc: str = "embedding", progress: bool = True):
    """(kept positions, float32 rows [n, d]) of ``paths`` with a progress bar (``progress``: drawn on a terminal,
    ``xbm.runtime.progress.bar``); skipped images are named on stderr. Raises BadImageError under ``on_error=stop``.
    ``xbm-tune embed`` and ``xbm-tune retrieve`` (its gallery and its queries) embed through it."""
    from tqdm import tqdm

    from xbm.runtime.progress import bar as progress_bar

    positions, rows = [], []
    with progress_bar(desc=desc, enabled=progress, total=len(paths), unit="img") as bar:
        for batch in embedder.batches(paths, batch_size, device, on_error):
            for _, reason in batch.skipped:
                tqdm.write(f"skipped: {reason}", file=sys.stderr)
            positions += batch.positions
            rows.append(batch.rows)
            bar.update(len(batch.positions) + len(batch.skipped))
    return positions, torch.cat(rows) if rows else torch.zeros(0, embedder.embedding_size)
