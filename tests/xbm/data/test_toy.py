import numpy as np
import pytest
import torch

from xbm.data import build_dataset
from xbm.data.toy import make_toy


def test_toy_contract_and_sizes(config, check_splits):
    splits = build_dataset(config(dataset="toy"))
    check_splits(splits)
    assert splits.input_kind == "vector" and splits.input_shape == (40,)
    assert len(splits.train) == 200 * 8 and len(splits.test.query) == 200 * 8 and splits.test.gallery is None
    assert splits.num_classes == 400 and splits.val is None
    assert torch.equal(torch.bincount(splits.train_labels), torch.full((200,), 8))
    # super-classes span both halves, so super-class metrics mean something on the test split
    test_supers = splits.superclass_of[splits.test.query.labels].unique()
    assert len(test_supers) == 20 and len(splits.superclass_of[splits.train_labels].unique()) == 20


def test_toy_is_deterministic_and_independent_of_seed(config):
    a = build_dataset(config(dataset="toy", seed=0))
    b = build_dataset(config(dataset="toy", seed=123))
    assert torch.equal(a.train.source.vectors, b.train.source.vectors)
    assert torch.equal(a.train_labels, b.train_labels) and torch.equal(a.superclass_of, b.superclass_of)
    assert torch.equal(a.train[5][0], b.train[5][0])


def test_toy_ignores_transforms(config):
    splits = build_dataset(config(dataset="toy"))
    before = splits.train[3][0].clone()
    splits.set_transforms(lambda x: x * 0, lambda x: x * 0)
    assert torch.equal(splits.train[3][0], before)


def test_toy_inputs_are_standardised_and_finite():
    x = make_toy().source.vectors
    assert torch.isfinite(x).all()
    assert torch.allclose(x.mean(0), torch.zeros(40), atol=1e-4)
    assert torch.allclose(x.std(0, unbiased=False), torch.ones(40), atol=1e-3)


@pytest.mark.parametrize("kwargs", [dict(num_classes=1), dict(samples_per_class=1), dict(num_superclasses=0)])
def test_toy_rejects_degenerate_sizes(kwargs):
    with pytest.raises(ValueError, match="toy needs"):
        make_toy(**kwargs)


def _recall_at_1(embeddings: torch.Tensor, labels: torch.Tensor) -> float:
    e = torch.nn.functional.normalize(embeddings, dim=1)
    similarity = e @ e.T
    similarity.fill_diagonal_(-2.0)
    return (labels[similarity.argmax(1)] == labels).float().mean().item()


def test_toy_is_learnable_by_a_small_mlp(config):
    """The reason the toy exists: a small MLP trained with SupCon for two epochs on the training classes
    must clearly raise leave-one-out Recall@1 on the unseen test classes."""
    from pytorch_metric_learning import losses

    splits = build_dataset(config(dataset="toy"))
    x_train = splits.train.source.vectors[splits.train.indices]
    x_test = splits.test.query.source.vectors[splits.test.query.indices]
    y_train, y_test = splits.train_labels, splits.test.query.labels
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(40, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    before = _recall_at_1(model(x_test).detach(), y_test)
    loss_fn, opt = losses.SupConLoss(temperature=0.1), torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    classes = y_train.unique().numpy()
    for _ in range(2 * len(y_train) // 64):  # two epochs of 16 classes x 4 samples
        batch = np.concatenate([rng.choice(np.flatnonzero(y_train.numpy() == c), 4, replace=False)
                                for c in rng.choice(classes, 16, replace=False)])
        loss = loss_fn(model(x_train[batch]), y_train[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = _recall_at_1(model(x_test).detach(), y_test)
    assert before < 0.25 and after > before + 0.12, (before, after)
