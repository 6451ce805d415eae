"""xbm.training.sync_bn: converting a timm model's BatchNorm layers keeps what the model computes."""
from __future__ import annotations

import copy

import pytest
import timm
import torch

from xbm.training.sync_bn import GlooSyncBatchNormAct, convert_sync_batchnorm, count_sync_batchnorm


@pytest.mark.parametrize("training", [False, True])
def test_timm_norm_act_layers_keep_their_activation(training):
    """Bug caught: torch's ``nn.SyncBatchNorm.convert_sync_batchnorm`` turns timm's ``BatchNormAct2d`` (EfficientNet,
    MobileNetV3, RegNet, DenseNet) into a plain SyncBatchNorm whose forward never applies the activation it
    keeps as a child, so every multi-worker run of those models trained another network. Without a process
    group the synchronised layers compute plain BatchNorm, so the converted model must match the original."""
    torch.manual_seed(0)
    model = timm.create_model("test_efficientnet", num_classes=0).train(training)
    original = copy.deepcopy(model)
    x = torch.randn(4, 3, 32, 32)
    converted = convert_sync_batchnorm(model, torch.device("cpu"))
    acts = [m for m in converted.modules() if isinstance(m, GlooSyncBatchNormAct)]
    assert acts and count_sync_batchnorm(converted) == sum(
        isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in original.modules())
    torch.testing.assert_close(converted(x), original(x))
