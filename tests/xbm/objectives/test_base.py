"""``embed_views``: sub-batches with their own BatchNorm statistics (MoCo's shuffling BN on one device)."""
import torch

from xbm.objectives.base import embed_views
from xbm.runtime.device import Runtime

from ..conftest import tiny_trainer

RUNTIME = Runtime.from_config("cpu", "off", False)


def _bn_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)).train()


def test_splits_normalise_each_sub_batch_on_its_own():
    """Bug caught: the batch embedded whole when splits > 1 (queries and keys would share BatchNorm statistics:
    the leak MoCo's shuffling BN exists to stop), or split when splits == 1."""
    x = torch.randn(8, 3) * torch.arange(1.0, 9.0).view(-1, 1)  # halves with different statistics
    model = _bn_model()
    whole = embed_views(model, x, lambda v: v, RUNTIME, 1)
    halves = embed_views(model, x, lambda v: v, RUNTIME, 2)
    torch.testing.assert_close(whole, model(x))
    torch.testing.assert_close(embed_views(model, x, lambda v: v, RUNTIME), whole)  # the default: one batch
    torch.testing.assert_close(halves, torch.cat([model(x[:4]), model(x[4:])]))
    assert not torch.allclose(whole, halves)


def test_moco_queries_use_the_bn_splits_too():
    """Bug caught: only the keys split (queries normalised over the whole batch, keys over halves)."""
    trainer = tiny_trainer(objective="moco", **{"moco.bn_splits": 2})
    model = _bn_model()
    moco = trainer.objective
    moco.key_encoder = _bn_model()
    x = torch.randn(8, 2, 3) * torch.arange(1.0, 9.0).view(-1, 1, 1)
    batch = moco(model, x, torch.zeros(8, dtype=torch.long), torch.arange(8), lambda v: v, RUNTIME)
    torch.testing.assert_close(batch.embeddings[:8], torch.cat([model(x[:4, 0]), model(x[4:, 0])]))
    assert batch.indices.tolist() == list(range(8)) * 2
