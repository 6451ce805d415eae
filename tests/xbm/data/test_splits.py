import numpy as np
import pytest
import torch

from xbm.data import build_dataset
from xbm.data.base import RawData
from xbm.data.sources import VectorSource
from xbm.data.splits import assemble, encode, pick_val_classes


def raw(labels, train, query, gallery=None, supers=None, groups=None, names=None):
    labels = np.asarray(labels)
    return RawData(name="t", source=VectorSource(torch.arange(len(labels) * 2.0).reshape(-1, 2)),
                   labels=labels, train=np.asarray(train), query=np.asarray(query),
                   gallery=None if gallery is None else np.asarray(gallery),
                   superlabels=None if supers is None else np.asarray(supers),
                   class_groups=None if groups is None else np.asarray(groups), superclass_names=names)


def test_encode_is_sorted_and_contiguous():
    assert encode([("b", 2), ("a", 9), ("b", 2), ("a", 1)]).tolist() == [2, 1, 2, 0]


@pytest.mark.parametrize("fraction, expected", [(0.0, 0), (0.01, 1), (0.25, 5), (0.5, 10), (0.9, 18)])
def test_pick_val_classes_sizes(fraction, expected):
    picked = pick_val_classes(np.arange(100, 120), fraction, "t")
    assert len(picked) == expected and set(picked) <= set(range(100, 120))


def test_pick_val_classes_refuses_to_empty_training():
    with pytest.raises(ValueError, match="val_fraction=0.9 leaves no training class"):
        pick_val_classes(np.arange(2), 0.9, "t")


def test_val_split_is_class_disjoint_and_seed_independent(config, check_splits):
    a = build_dataset(config(dataset="toy", val_fraction=0.25, seed=1))
    b = build_dataset(config(dataset="toy", val_fraction=0.25, seed=2))
    check_splits(a)
    assert np.array_equal(a.val.query.indices, b.val.query.indices)  # same classes for every trial
    assert len(a.train_labels.unique()) == 150 and len(a.val.query.labels.unique()) == 50
    train_raw = set(a.train.source.vectors[a.train.indices][:, 0].tolist())
    assert train_raw.isdisjoint(a.val.query.source.vectors[a.val.query.indices][:, 0].tolist())
    # the validation classes were training classes: the union is the val_fraction=0 training set
    full = build_dataset(config(dataset="toy"))
    assert sorted(np.concatenate([a.train.indices, a.val.query.indices])) == sorted(full.train.indices)
    assert torch.equal(a.test.query.labels, full.test.query.labels)


def test_labels_order_train_then_val_then_test():
    splits = assemble(raw([7, 7, 3, 3, 5, 5, 9, 9], train=[0, 1, 2, 3, 4, 5], query=[6, 7]), 0.0, 8)
    assert splits.train_labels.tolist() == [2, 2, 0, 0, 1, 1] and splits.test.query.labels.tolist() == [3, 3]


def test_unanswerable_queries_are_dropped_with_their_class():
    splits = assemble(raw([0, 0, 1, 2, 2, 3], train=[0, 1], query=[2, 3, 5], gallery=[4]), 0.0, 8)
    assert splits.test.query.indices.tolist() == [3] and splits.num_classes == 2


def test_superclass_must_be_unique_per_class():
    with pytest.raises(ValueError, match="exactly one super-class"):
        assemble(raw([0, 0, 1, 1], train=[0, 1], query=[2, 3], supers=[0, 1, 1, 1]), 0.0, 8)


def test_superclasses_become_contiguous():
    splits = assemble(raw([0, 0, 1, 1, 2, 2], train=[0, 1, 2, 3], query=[4, 5], supers=[4, 4, 9, 9, 4, 4]),
                      0.0, 8)
    assert splits.superclass_of.tolist() == [0, 1, 0]


def test_empty_parts_are_rejected():
    with pytest.raises(ValueError, match="non-empty"):
        assemble(raw([0, 0], train=[], query=[0, 1]), 0.0, 8)
    with pytest.raises(ValueError, match="0 answerable query"):
        assemble(raw([0, 0, 1, 2], train=[0, 1], query=[2], gallery=[3]), 0.0, 8)


def test_negative_class_ids_are_rejected():
    with pytest.raises(ValueError, match=">= 0"):
        assemble(raw([0, 0, -1, -1], train=[0, 1], query=[2, 3]), 0.0, 8)


def test_train_plus_val_trains_on_the_validation_classes(config):
    """Bug: a refit (train_on=train+val) still held out the validation classes: its training set must hold the
    training and validation classes together, and the test classes stay out of it."""
    split = build_dataset(config(dataset="toy", val_fraction=0.25))
    refit = build_dataset(config(dataset="toy", val_fraction=0.25, train_on="train+val"))
    held_out = len(split.train_labels.unique()) + len(split.val.query.labels.unique())
    assert refit.val is None and len(refit.train_labels.unique()) == held_out == 200
    assert sorted(refit.train.indices) == sorted(np.concatenate([split.train.indices, split.val.query.indices]))
    assert np.array_equal(refit.test.query.indices, split.test.query.indices)
    assert np.intersect1d(refit.train.indices, refit.test.query.indices).size == 0


def test_train_on_all_leaves_no_class_or_sample_out():
    """Bug: train_on=all left a class out (the test-only ones, or a query whose class the gallery lacks)."""
    data = raw([0, 0, 1, 1, 2, 2, 3, 4, 4], train=[0, 1, 2, 3], query=[4, 6, 7], gallery=[5, 8])
    splits = assemble(data, 0.0, 8, train_on="all")
    assert splits.val is None and sorted(splits.train.indices) == list(range(9))
    assert splits.train_labels.min() >= 0 and len(splits.train_labels.unique()) == splits.num_classes == 5


def _sources(split) -> set:
    return set(split.source.vectors[split.indices][:, 0].tolist())


def test_train_on_all_with_val_fraction_trains_on_everything_but_the_validation_classes():
    """Bug: train_on=all ignored val_fraction (a sweep on every class then has nothing held out to select on),
    or trained on the validation classes it scores."""
    data = raw([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5], train=[0, 1, 2, 3, 4, 5, 6, 7], query=[8, 9, 10, 11])
    splits = assemble(data, 0.25, 8, train_on="all")
    val = _sources(splits.val.query)
    assert len(splits.val.query.labels.unique()) == 1 and val.isdisjoint(_sources(splits.train))
    assert len(splits.train) + len(splits.val.query) == 12   # the test classes train too


def test_val_by_superclass_holds_out_whole_superclasses():
    """Bug: val_by=superclass split an alphabet (some of its characters trained on, others validated), so that
    validation saw alphabets the model trained on; the held-out ones must be recorded by name."""
    # 6 super-classes of 2 training classes each (+ a test class each); class k in super-class k // 2
    labels = np.repeat(np.arange(18), 2)
    supers = np.concatenate([np.repeat(np.arange(6), 4), np.repeat(np.arange(6), 2)])
    train, query = np.arange(24), np.arange(24, 36)
    names = tuple(f"alphabet{s}" for s in range(6))
    splits = assemble(raw(labels, train, query, supers=supers, names=names), 0.34, 8, val_by="superclass")
    sup = splits.superclass_of
    held = set(sup[splits.val.query.labels].tolist())
    assert len(held) == 2 and held.isdisjoint(sup[splits.train.labels].tolist())
    assert len(splits.val.query.labels.unique()) == 4 and len(splits.train.labels.unique()) == 8
    assert splits.val_superclasses == tuple(sorted(splits.val_superclasses)) and len(splits.val_superclasses) == 2
    # under train_on=all a held-out super-class's test classes leave training and the test split as well
    every = assemble(raw(labels, train, query, supers=supers, names=names), 0.34, 8, "all", "superclass")
    assert every.val_superclasses == splits.val_superclasses
    assert set(every.superclass_of[every.val.query.labels].tolist()) == held
    assert len(every.val.query.labels.unique()) == 6 and len(every.val.query) == 12
    assert held.isdisjoint(every.superclass_of[every.train.labels].tolist())
    assert held.isdisjoint(every.superclass_of[every.test.query.labels].tolist())
    assert len(every.train) == 36 - 12


def test_val_by_superclass_refused_without_superclasses():
    """Bug: val_by=superclass on a data set without super-classes fell back to something silently."""
    with pytest.raises(ValueError, match="val_by=superclass holds out whole super-classes, but dataset 't' has none"):
        assemble(raw([0, 0, 1, 1, 2, 2], train=[0, 1, 2, 3], query=[4, 5]), 0.5, 8, val_by="superclass")


def test_class_groups_fall_in_one_split():
    """Bug: a character's rotations (one class group, four classes) landed on both sides of the validation
    split, so the model validated on a rotation of a character it trained on."""
    # 10 groups of 4 classes, 2 samples each, all training; 1 test class
    labels = np.concatenate([np.repeat(np.arange(40), 2), [40, 40]])
    groups = np.concatenate([np.repeat(np.arange(10), 8), [10, 10]])
    splits = assemble(raw(labels, train=np.arange(80), query=[80, 81], groups=groups), 0.3, 8)
    val_groups = set(groups[splits.val.query.indices].tolist())
    assert len(val_groups) == 3 and len(splits.val.query.labels.unique()) == 12
    assert val_groups.isdisjoint(groups[splits.train.indices].tolist())
