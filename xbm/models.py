"""Embedding models: a backbone, a linear head to ``embedding_size``, and an L2-normalised output.

    z = normalize(W f(x) + b),   f = backbone features [B, F],   W: [embedding_size, F]

as in the XBM paper (Wang et al., CVPR 2020, §4.1) and the thesis protocol (seed 000 §5.2): the backbone is
a timm model without its classifier (``timm.create_model(name, pretrained=..., num_classes=0)``), the head
a ``nn.Linear`` that the warm-up trains alone.

Registry: ``MODELS`` maps our own names (``mlp``, for vector inputs such as the toy data set, or flattened
images) to builders; every other name is looked up in timm (``timm.list_models()``), for image inputs.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from xbm.config import TrainConfig
from xbm.errors import BadCheckpointError, PretrainedWeightsError

MLP_HIDDEN = 256


class EmbeddingModel(nn.Module):
    """``backbone`` [B, ...] -> [B, F] features; ``head`` Linear(F, embedding_size); L2-normalised output."""

    def __init__(self, backbone: nn.Module, feature_dim: int, embedding_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(feature_dim, embedding_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.head(self.backbone(x)), dim=1)


class MLPBackbone(nn.Module):
    """Two ReLU layers on the flattened input: the CPU toy's backbone (and a baseline for flat images)."""

    def __init__(self, in_features: int, hidden: int = MLP_HIDDEN) -> None:
        super().__init__()
        self.num_features = hidden
        self.layers = nn.Sequential(
            nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def _mlp(input_shape: tuple[int, ...]) -> nn.Module:
    return MLPBackbone(math.prod(input_shape))


def _timm(name: str, input_shape: tuple[int, ...], pretrained: bool) -> nn.Module:
    import timm

    if len(input_shape) != 3:
        raise ValueError(f"model {name!r} is a timm image model and needs image inputs (C, H, W), but the "
                         f"data set gives inputs of shape {tuple(input_shape)}; use model=mlp")
    kwargs = dict(num_classes=0, in_chans=int(input_shape[0]))
    if not pretrained:
        return timm.create_model(name, pretrained=False, **kwargs)
    try:
        return timm.create_model(name, pretrained=True, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any download/hub failure gets the same actionable message
        raise PretrainedWeightsError(
            f"pretrained=True could not fetch timm's weights for model {name!r} ({type(exc).__name__}: "
            f"{exc}). Offline machines: download the weights once elsewhere and set pretrained_path=FILE "
            "(a .pth/.bin/.safetensors state dict of the backbone), or set pretrained=false") from exc


#: our backbones by name (none has published weights): input_shape -> module with ``num_features``; any other
#: name is timm's
MODELS: dict[str, Callable[[tuple[int, ...]], nn.Module]] = {"mlp": _mlp}


def create_backbone(model: str, input_shape: tuple[int, ...], pretrained: bool = False) -> nn.Module:
    """The registry lookup: our names first, then timm's; the backbone has a ``num_features`` attribute."""
    if model in MODELS:
        if pretrained:
            raise ValueError(f"pretrained must be false for model {model!r} (no published weights exist), but got "
                             f"pretrained=True; use pretrained_path=FILE to load a state dict saved from an {model} "
                             "backbone")
        return MODELS[model](tuple(input_shape))
    import timm

    if not timm.is_model(model):
        raise ValueError(f"model must be one of {sorted(MODELS)} or a timm model name (timm.list_models()), "
                         f"but got {model!r}")
    return _timm(model, tuple(input_shape), pretrained)


def create_embedding_model(model: str, input_shape: tuple[int, ...], embedding_size: int, pretrained: bool = False,
                           pretrained_path: str = "") -> EmbeddingModel:
    """Backbone from the registry (timm's weights with ``pretrained``, or the local file ``pretrained_path``,
    which wins) with a head to ``embedding_size``. The run's config reaches it through :func:`model_kwargs`.

    Args:
        model: a timm model name (``resnet50``, ``resnet10t``) or one of ours (``MODELS``: ``mlp``, ``test_resnet``).
        input_shape: one input's shape, ``(channels, height, width)`` or ``(features,)`` for vectors.
        embedding_size: the head's output size (the embedding, L2-normalised by the model).
        pretrained: timm's ImageNet weights (from the hub when online, unless ``pretrained_path`` gives them).
        pretrained_path: a local weights file for the backbone (no download).

    Returns:
        The backbone with its embedding head.

    Raises:
        ValueError: an unknown model, or ``pretrained`` for one of ours (they have no weights).
        FileNotFoundError: ``pretrained_path`` does not exist.
    """
    # ours refuse pretrained outright; timm's skip the download when the local file gives the weights
    backbone = create_backbone(model, input_shape, pretrained and (model in MODELS or not pretrained_path))
    if pretrained_path:
        load_backbone_weights(backbone, pretrained_path)
    return EmbeddingModel(backbone, int(backbone.num_features), embedding_size)


def model_kwargs(cfg: TrainConfig) -> dict:
    """The config keys :func:`create_embedding_model` takes (timm's ``optimizer_kwargs`` pattern)."""
    return dict(model=cfg.model, embedding_size=cfg.embedding_size, pretrained=cfg.pretrained,
                pretrained_path=cfg.pretrained_path)


# Config key ``compile`` -> torch.compile's mode. torch's "max-autotune" also replays the model as CUDA graphs,
# which hand every call the same output buffers: an evaluation keeping each batch's embeddings (the Embedder)
# would read the last batch's, or torch's "overwritten by a subsequent run" error. So its kernel search
# without CUDA graphs.
TORCH_COMPILE_MODES = {"default": "default", "max-autotune": "max-autotune-no-cudagraphs"}


def compile_model(model: nn.Module, mode: str) -> nn.Module:
    """Config key ``compile``: ``off`` leaves ``model`` as it is; ``default`` / ``max-autotune`` compile its
    forward with ``torch.compile`` (mode :data:`TORCH_COMPILE_MODES`) in place (``nn.Module.compile``), so
    its ``state_dict`` keys stay the plain model's (no ``_orig_mod.`` prefix) and checkpoints load compiled
    or not. Compiled lazily, at the first call; a train/eval or frozen-backbone switch recompiles once."""
    if mode != "off":
        model.compile(mode=TORCH_COMPILE_MODES[mode])
    return model


def load_backbone_weights(backbone: nn.Module, path: str) -> None:
    """Load a local state-dict file (timm/torchvision checkpoint, .pth or .safetensors) into ``backbone``.

    Classifier weights (timm's ``pretrained_cfg['classifier']``) are dropped since the backbone has none;
    a first convolution with another channel count is adapted with timm's ``adapt_input_conv`` (e.g. RGB
    weights for grey Omniglot). Every other backbone weight must be present: a file for another
    architecture fails instead of silently leaving random weights.
    """
    from timm.models import adapt_input_conv, load_state_dict

    if not Path(path).is_file():
        raise FileNotFoundError(f"pretrained_path must name an existing state-dict file, but got {path!r}")
    try:
        state = load_state_dict(path)
    except Exception as exc:  # a truncated or foreign file: torch/safetensors errors never name it
        raise BadCheckpointError(path, f"{type(exc).__name__}: {exc}") from exc
    pretrained_cfg = getattr(backbone, "pretrained_cfg", {}) or {}
    classifiers = pretrained_cfg.get("classifier") or ()
    for name in (classifiers,) if isinstance(classifiers, str) else classifiers:
        state.pop(f"{name}.weight", None)
        state.pop(f"{name}.bias", None)
    own = backbone.state_dict()
    first_conv = pretrained_cfg.get("first_conv")
    key = f"{first_conv}.weight" if isinstance(first_conv, str) else None
    if key in state and key in own and state[key].shape[1] != own[key].shape[1]:
        state[key] = adapt_input_conv(own[key].shape[1], state[key])
    result = backbone.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(f"pretrained_path {path!r} must hold this backbone's weights, but "
                         f"{len(result.missing_keys)} keys are missing (e.g. {result.missing_keys[:3]}) and "
                         f"{len(result.unexpected_keys)} unexpected (e.g. {result.unexpected_keys[:3]})")
