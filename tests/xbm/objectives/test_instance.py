"""Instance discrimination (``objective=instance``): two views per image, the image's id as its label."""
import re

import pytest
import torch

from xbm.objectives.views import ShuffledIndices, TwoViews, second_seed

from ..conftest import tiny_trainer


def test_both_views_of_an_image_carry_its_training_index_as_label():
    """Bug caught: views labelled by position in the batch (every step's labels 0..B-1 would make stored rows
    of other images positives) or by class (labels leaking), or the views not paired row for row."""
    trainer = tiny_trainer(objective="instance")
    x = torch.randn(4, 2, trainer.splits.input_shape[0])
    idx = torch.tensor([7, 3, 11, 0])
    batch = trainer.objective(trainer.model, x, torch.zeros(4, dtype=torch.long), idx, lambda v: v, trainer.runtime)
    assert batch.labels.tolist() == [7, 3, 11, 0, 7, 3, 11, 0] and batch.enqueue_mask is None
    assert batch.indices.tolist() == [7, 3, 11, 0, 7, 3, 11, 0]  # the memory keeps each row's sample
    trainer.model.eval()
    torch.testing.assert_close(batch.embeddings[:4], trainer.model(x[:, 0]))
    torch.testing.assert_close(batch.embeddings[4:], trainer.model(x[:, 1]))


def test_two_views_are_two_seeded_draws_of_the_transform():
    """Bug caught: both views drawn with the same seed (identical views: nothing to be invariant to), or the
    second view's seed not a function of the first's (runs would depend on the worker processes)."""

    class Seeds(torch.utils.data.Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, item):
            i, seed = item
            return torch.tensor([float(seed % 1000)]), 0, i

    x, _, i = TwoViews(Seeds())[(2, 123456789)]
    assert i == 2 and x[:, 0].tolist() == [789.0, float(second_seed(123456789) % 1000)]
    assert second_seed(123456789) != 123456789


def test_second_view_seeds_are_spread_over_the_samplers_range():
    """Bug caught: a second-view seed that takes few values (e.g. ``% 2 * 63``: every image's second view drawn
    from one of two seeds, so the views are correlated across images) or leaves the int64 range the sampler's
    seeds live in."""
    seeds = [second_seed(s) for s in range(0, 2**63 - 1, 2**53 + 12345)]
    assert len(set(seeds)) == len(seeds) and all(0 <= s < 2**63 and isinstance(s, int) for s in seeds)


def test_a_pass_is_a_permutation_cut_to_whole_batches():
    """Bug caught: images drawn with replacement (some never seen in an epoch) or a partial last batch."""
    import numpy as np

    np.random.seed(0)
    drawn = list(ShuffledIndices(10, 4))
    assert len(drawn) == 8 and len(set(drawn)) == 8 and set(drawn) <= set(range(10))
    assert sorted(ShuffledIndices(4, 4)) == [0, 1, 2, 3]  # one batch of the whole set is allowed
    with pytest.raises(ValueError, match="batch_size must be <= the 4 training images"):
        ShuffledIndices(4, 5)


def test_second_seed_is_the_documented_mmix_step():
    """Bug caught (mutation testing): a changed constant or sign in the LCG step: every two-view run's
    second views would silently differ from the recorded runs'. By hand, (a s + c) mod 2**63 with Knuth's
    MMIX a = 6364136223846793005, c = 1442695040888963407."""
    assert second_seed(0) == 1442695040888963407
    assert second_seed(1) == 7806831264735756412  # a + c < 2**63
    assert second_seed(2) == (2 * 6364136223846793005 + 1442695040888963407) - 2**63 == 4947595451727773609


def test_two_views_of_an_unseeded_index_are_two_plain_reads():
    """Bug caught (mutation testing): an index without a seed (a plain DataLoader, no SeededSampler)
    unpacked as ``(i, seed)`` or seeded with ``int(None)``: a crash instead of two reads of item ``i``."""
    train = tiny_trainer(objective="instance").splits.train
    views, label, index = TwoViews(train)[3]
    x, y, i = train[3]
    assert (label, index) == (y, i) == (y, 3)
    assert torch.equal(views, torch.stack([torch.as_tensor(x)] * 2))


def test_a_batch_larger_than_the_set_is_refused_in_full():
    """Bug caught (mutation testing): the message's advice ("lower batch_size") lost or garbled."""
    with pytest.raises(ValueError, match="^" + re.escape(
            "batch_size must be <= the 4 training images, but got batch_size=5; lower batch_size") + "$"):
        ShuffledIndices(4, 5)
