"""MoCo (``objective=moco``): the moving-average key encoder, the key queue, and equality with PML's MoCo."""
import copy

import pytest
import torch
from pytorch_metric_learning import losses

from xbm.losses.xbm_loss import XBMLoss
from xbm.objectives.moco import MoCo
from xbm.runtime.device import Runtime

from ..conftest import tiny_config, tiny_trainer


def test_key_encoder_is_the_moving_average_of_the_query_encoder():
    """Bug caught: the EMA weights swapped (k <- (1 - m) k + m q), the key encoder updated by the optimiser or
    left frozen, or aliasing the query encoder (a shallow copy: keys would equal queries)."""
    trainer = tiny_trainer(objective="moco", **{"moco.momentum": 0.9})
    moco, model = trainer.objective, trainer.model
    assert all(not p.requires_grad for p in moco.key_encoder.parameters())
    before = [p.detach().clone() for p in moco.key_encoder.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # as if the optimiser moved the query encoder
    moco.after_step(model)
    for k_old, k_new, q in zip(before, moco.key_encoder.parameters(), model.parameters()):
        torch.testing.assert_close(k_new, 0.9 * k_old + 0.1 * q.detach(), rtol=0, atol=1e-6)
        assert k_new.data_ptr() != q.data_ptr()


def test_keys_are_the_key_encoders_embeddings_of_the_second_views_in_order():
    """Bug caught: the BN shuffle not undone (key i belongs to another image), or the views swapped."""
    trainer = tiny_trainer(objective="moco", **{"moco.bn_splits": 4})
    moco, model = trainer.objective, trainer.model
    with torch.no_grad():
        for p in moco.key_encoder.parameters():
            p.mul_(0.5)  # keys and queries now differ
    x = torch.randn(8, 2, trainer.splits.input_shape[0])
    idx = torch.arange(10, 18)
    model.eval()  # eval mode: no batch statistics, so the order of the key batch cannot matter
    batch = moco(model, x, torch.zeros(8, dtype=torch.long), idx, lambda v: v, trainer.runtime)
    moco.key_encoder.eval()
    torch.testing.assert_close(batch.embeddings[8:], moco.key_encoder(x[:, 1]))
    torch.testing.assert_close(batch.embeddings[:8], model(x[:, 0]))
    assert batch.labels.tolist() == idx.tolist() * 2 and batch.enqueue_mask.tolist() == [False] * 8 + [True] * 8


def test_queue_holds_the_newest_keys_and_their_instance_labels_after_wrapping_around():
    """Bug caught: queries enqueued with the keys, the ring restarting at 0, or labels misaligned with rows."""
    xbm = XBMLoss(losses.NTXentLoss(0.1), embedding_size=2, memory_size=5)
    mask = torch.tensor([False, False, True, True])
    for step in range(3):  # 6 keys into 5 slots: the first key is overwritten
        ids = torch.tensor([2 * step, 2 * step + 1] * 2)
        emb = torch.nn.functional.normalize(torch.randn(4, 2), dim=1)
        emb[2:] = torch.tensor([[float(2 * step), 1.0], [float(2 * step + 1), 1.0]])
        xbm(emb, ids, enqueue_mask=mask)
    stored, labels, _, _ = xbm.memory.valid()
    assert labels.tolist() == [5, 1, 2, 3, 4]  # slot 0 holds the 6th key
    assert stored[:, 0].tolist() == [5.0, 1.0, 2.0, 3.0, 4.0]


def test_moco_loss_without_adaptation_equals_pmls_cross_batch_memory_with_an_enqueue_mask():
    """Bug caught: a comparison that differs from PML's MoCo recipe (self pairs dropped between a query and
    its own key, queries compared before the keys are enqueued, the wrong rows enqueued), in value or gradient,
    including once the queue wraps around."""
    torch.manual_seed(0)
    ours = XBMLoss(losses.NTXentLoss(0.2), embedding_size=8, memory_size=20)
    pml = losses.CrossBatchMemory(losses.NTXentLoss(0.2), embedding_size=8, memory_size=20)
    for step in range(4):
        q = torch.nn.functional.normalize(torch.randn(6, 8), dim=1).requires_grad_()
        k = torch.nn.functional.normalize(torch.randn(6, 8), dim=1)
        ids = torch.arange(6) + 100 * (step % 2)  # instance ids recur every other step, as in a new epoch
        emb, labels = torch.cat([q, k]), torch.cat([ids, ids])
        mask = torch.tensor([False] * 6 + [True] * 6)
        mine = ours(emb, labels, enqueue_mask=mask)
        (grad_mine,) = torch.autograd.grad(mine, q)
        theirs = pml(emb, labels, enqueue_mask=mask)
        (grad_theirs,) = torch.autograd.grad(theirs, q)
        torch.testing.assert_close(mine, theirs)
        torch.testing.assert_close(grad_mine, grad_theirs)


def test_key_encoder_follows_the_query_encoders_modes():
    """Bug caught: the key encoder left in train mode while the query backbone is frozen in eval mode (the
    warm-up): its BatchNorm statistics would move while the query encoder's do not."""
    trainer = tiny_trainer(objective="moco")
    model, moco = trainer.model, trainer.objective
    model.train()
    model.backbone.eval()
    moco._follow_modes(model)
    assert moco.key_encoder.training and not moco.key_encoder.backbone.training


def test_bn_splits_must_divide_the_batch():
    """Bug caught: a batch that does not split evenly (the last split's statistics from fewer images)."""
    with pytest.raises(ValueError, match="batch_size must satisfy a multiple of moco.bn_splits=3"):
        tiny_config(objective="moco", **{"moco.bn_splits": 3})


def test_the_enqueue_mask_is_on_the_host_and_the_rest_on_the_batchs_device():
    """Bugs caught: the key mask built on the batch's device (``device=ids.device``), so splitting the batch by
    it makes the host wait for the GPU every step; and the embeddings or ids not on the batch's device (mutation
    testing). "meta" stands in for a GPU."""
    model = torch.nn.Linear(3, 2).to("meta")
    moco = MoCo(tiny_config(objective="moco"), model)
    x, idx = torch.empty(4, 2, 3, device="meta"), torch.arange(4, device="meta")
    batch = moco(model, x, idx, idx, lambda v: v, Runtime(torch.device("meta"), None, channels_last=False))
    assert {t.device.type for t in batch[:3]} == {"meta"} and batch.embeddings.shape == (8, 2)
    assert batch.enqueue_mask.device.type == "cpu" and batch.enqueue_mask.tolist() == [False] * 4 + [True] * 4
