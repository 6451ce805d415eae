import numpy as np
import pytest

from xbm.data import build_dataset
from xbm.data.episodes import draw_episodes

from tests.xbm.data.conftest import make_drawings


def test_episodes_by_hand():
    """Bug: an episode mixed super-classes, took a class twice, or went past its super-class's classes."""
    # super-class 0: classes 0, 1, 2 (two drawers each); super-class 1: class 3 alone (no episode of one way)
    labels = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    supers = np.array([0, 0, 0, 0, 0, 0, 1, 1])
    drawers = np.array([1, 2, 1, 2, 1, 2, 1, 2])
    episodes = draw_episodes(labels, supers, drawers, np.ones(8, bool), n=5, way=20)
    assert len(episodes) == 5 and episodes.ways == (3,) * 5
    for train, test in zip(episodes.train, episodes.test):
        assert labels[train].tolist() == [0, 1, 2] and labels[test].tolist() == [0, 1, 2]
        assert len(set(drawers[train])) == 1 and set(drawers[train]).isdisjoint(drawers[test])
    capped = draw_episodes(labels, supers, drawers, np.ones(8, bool), n=3, way=2)
    assert capped.ways == (2, 2, 2)
    # a class with one eligible drawing cannot take part: super-class 0 is left with one class, so no episode
    assert draw_episodes(labels, supers, drawers, np.array([1, 1, 1, 0, 1, 0, 1, 1], bool), n=3) is None
    assert draw_episodes(labels, supers, drawers, np.ones(8, bool), n=0) is None


def test_episodes_without_shared_drawers_still_pair_two_drawers_per_class():
    """Bug: where no two drawers drew every class of an episode, a class's test drawing was its training one."""
    labels = np.array([0, 0, 1, 1])
    drawers = np.array([1, 2, 3, 4])
    episodes = draw_episodes(labels, None, drawers, np.ones(4, bool), n=4)
    for train, test in zip(episodes.train, episodes.test):
        assert (labels[train] == labels[test]).all() and (drawers[train] != drawers[test]).all()


@pytest.fixture
def omniglot(tmp_path, config):
    make_drawings(tmp_path, alphabets=("Alpha", "Beta", "Gamma", "Delta"), characters=5, drawers=4)

    def build(**values):
        return build_dataset(config(dataset="omniglot", data_root=str(tmp_path), val_fraction=0.5,
                                    val_by="superclass", train_on="all", **values))
    return build


def test_validation_episodes_are_the_same_for_every_trial(omniglot):
    """Bug: the validation episodes followed the trial's seed (or changed per build), so trials and epochs were
    scored on different tasks and their val_oneshot_error not comparable."""
    a, b = omniglot(seed=0), omniglot(seed=7, lr=0.5)
    assert a.val.episodes is not None and len(a.val.episodes) == 20
    for ea, eb in ((a.val.episodes.train, b.val.episodes.train), (a.val.episodes.test, b.val.episodes.test)):
        for x, y in zip(ea, eb):
            assert np.array_equal(a.val.query.indices[x], b.val.query.indices[y])


@pytest.mark.parametrize("rotations", [1, 4])
def test_episode_drawings_come_from_two_drawers_of_one_alphabet(omniglot, rotations):
    """Bug: an episode's test drawing shared its drawer with the training drawing (an easier task than the real
    runs'), mixed alphabets, or used a rotated drawing (the real runs have none)."""
    splits = omniglot(omniglot_rotations=rotations)
    val, episodes = splits.val.query, splits.val.episodes
    source = splits.train.source
    drawer = {j: source.where(j).rsplit("_", 1)[1] for j in range(len(source))}
    assert episodes.ways == (5,) * 20   # 5 characters per alphabet: every episode takes all of one alphabet
    for train, test in zip(episodes.train, episodes.test):
        tj, sj = val.indices[train], val.indices[test]
        assert {drawer[j] for j in tj} != {drawer[j] for j in sj}
        assert all(drawer[a] != drawer[b] for a, b in zip(tj, sj))
        assert len(set(splits.superclass_of[val.labels[train]].tolist())) == 1
        assert val.labels[train].tolist() == val.labels[test].tolist() and len(set(val.labels[train].tolist())) == 5
        assert "turned" not in " ".join(source.where(j) for j in (*tj, *sj))
