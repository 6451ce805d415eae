"""What every label-free objective promises: no training label reaches training, and exact resume."""
import io

import pytest
import torch

from xbm.data.splits import assemble
from xbm.data.toy import make_toy
from xbm.trainer import TIMING_KEYS as TIMINGS, Trainer

from ..conftest import tiny_config

LABEL_FREE = {
    "instance": {"normaliser.kind": "xbn"},
    "moco": {"normaliser.kind": "axbn", "memory.ratio": 0.3},
    "neighbours": {"normaliser.kind": "xbn", "neighbours.threshold": 0.3, "neighbours.pool": 20},
}


def _splits(cfg, shuffle_labels=False):
    splits = assemble(make_toy(num_classes=48, samples_per_class=8), cfg.val_fraction, cfg.image_size)
    if shuffle_labels:
        train = splits.train
        train.labels = train.labels[torch.randperm(len(train.labels), generator=torch.Generator().manual_seed(1))]
    return splits


def _weights(trainer):
    return {k: v.clone() for k, v in trainer.model.state_dict().items()}


@pytest.mark.parametrize("objective", sorted(LABEL_FREE))
def test_shuffled_training_labels_give_bit_identical_training(objective):
    """Bug caught: a training label reaching the sampler, the warm-up, the loss, the memory or a normaliser
    (e.g. the M-per-class sampler kept, or y passed to the loss instead of the instance ids)."""
    cfg = tiny_config(objective=objective, epochs=2, warmup_epochs=1, **LABEL_FREE[objective])
    runs = []
    for shuffle in (False, True):
        trainer = Trainer(cfg, splits=_splits(cfg, shuffle))
        losses = [m["loss"] for m in trainer.fit()]
        runs.append((losses, _weights(trainer), trainer.xbm.memory.embeddings.clone()))
    (loss_a, weights_a, memory_a), (loss_b, weights_b, memory_b) = runs
    assert loss_a == loss_b
    assert torch.equal(memory_a, memory_b)
    for name in weights_a:
        assert torch.equal(weights_a[name], weights_b[name]), name


@pytest.mark.parametrize("objective", sorted(LABEL_FREE))
def test_resume_after_an_epoch_repeats_the_uninterrupted_run_exactly(objective):
    """Bug caught: objective state missing from the checkpoint (MoCo's key encoder, the neighbours' pool) or
    its sampler not resumable: the resumed epochs would differ from the uninterrupted run's."""
    values = {"objective": objective, "epochs": 3, "warmup_epochs": 1, **LABEL_FREE[objective]}
    if objective == "neighbours":
        values["neighbours.refresh_epochs"] = 2  # epoch 2 reuses the checkpointed pool, epoch 3 rebuilds it
    cfg = tiny_config(**values)
    full = list(Trainer(cfg, splits=_splits(cfg)).fit())
    first = Trainer(cfg, splits=_splits(cfg))
    fit = first.fit()
    resumed = [next(fit)]
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    second = Trainer(cfg, splits=_splits(cfg))
    second.load_state_dict(torch.load(buffer, weights_only=True))
    resumed += list(second.fit())
    assert [m["epoch"] for m in resumed] == [1, 2, 3]
    for a, b in zip(full, resumed):
        diffs = {k: (a[k], b[k]) for k in a if k not in TIMINGS and a[k] != b[k] and not (a[k] != a[k] and b[k] != b[k])}
        assert not diffs, f"epoch {a['epoch']}: {diffs}"


def test_label_free_objectives_refuse_normalisers_that_read_labels():
    """Bug caught: PC-XBN / SC-XBN accepted under a label-free objective, where their class moments would be
    per-image (meaningless) or their super-classes a label leak."""
    for kind in ("pcxbn", "scxbn"):
        with pytest.raises(ValueError, match=f"normaliser.kind must satisfy not pcxbn or scxbn under objective=moco"):
            tiny_config(objective="moco", **{"normaliser.kind": kind})
