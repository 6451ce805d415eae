import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from xbm.data import build_dataset
from xbm.errors import DatasetNotFoundError

SMALL = Path(__file__).resolve().parents[3] / ".." / "shared" / "datasets" / "omniglot_small"
needs_small = pytest.mark.skipif(not (SMALL / "images_background_small1.zip").is_file(),
                                 reason=f"real Omniglot copy absent at {SMALL}")


@needs_small
def test_omniglot_small_from_zips(config, check_splits):
    splits = build_dataset(config(dataset="omniglot", data_root=str(SMALL), image_size=28))
    check_splits(splits)
    assert splits.num_classes == 242 and len(splits.superclass_of.unique()) == 8
    assert len(splits.train) + len(splits.test.query) == 242 * 20
    assert torch.equal(torch.bincount(splits.train_labels), torch.full((splits.num_train_classes,), 20))
    # half the characters of each alphabet train: each alphabet on both sides, within one character
    train_sup = torch.bincount(splits.superclass_of[splits.train_labels.unique()], minlength=8)
    test_sup = torch.bincount(splits.superclass_of[splits.test.query.labels.unique()], minlength=8)
    assert (train_sup - test_sup).abs().max() <= 1 and test_sup.min() >= 1
    x, label, index = splits.test.query[len(splits.test.query) - 1]
    assert x.shape == (1, 28, 28) and index == len(splits.test.query) - 1


@needs_small
def test_omniglot_strokes_are_high_on_a_zero_background(config):
    """Bug caught: the release's black-on-white drawings entering as they are stored (the collapse of issue 8)."""
    splits = build_dataset(config(dataset="omniglot", data_root=str(SMALL), image_size=28, normalize="none",
                                  augment="none"))
    decoded = np.asarray(splits.transforms.images(int(splits.train.indices[0])))
    assert decoded.dtype == np.uint8 and decoded.shape == (28, 28)
    assert decoded[0, 0] == 0 and decoded.max() > 200 and (decoded == 0).mean() > 0.7  # resized: strokes blur
    x = splits.batch_transform("eval")(splits.test.query[0][0][None])[0]
    assert float(x[0, 0, 0]) == 0.0 and float(x.mean()) < 0.25
    statistics = build_dataset(config(dataset="omniglot", data_root=str(SMALL), image_size=28)).statistics
    assert 0.03 < statistics.mean[0] < 0.2  # strokes cover a small share of the square


@needs_small
def test_omniglot_small_val_split(config, check_splits):
    splits = build_dataset(config(dataset="omniglot", data_root=str(SMALL), val_fraction=0.2))
    check_splits(splits)
    assert splits.val.query.labels.unique().numel() == round(0.2 * 122)


def make_omniglot_folder(root, write_image):
    for alphabet, n_chars in (("Alpha", 3), ("Beta", 2)):
        for c in range(1, n_chars + 1):
            for drawer in (1, 2):
                write_image(root / "images_evaluation" / alphabet / f"character{c:02d}" / f"0{c}_{drawer:02d}.png",
                            size=(6, 6), value=c, mode="1")


def test_omniglot_folders_zips_and_duplicates(tmp_path, write_image, config, check_splits):
    make_omniglot_folder(tmp_path, write_image)
    # the same alphabet in a zip too (read once), plus a new one only in a zip
    with zipfile.ZipFile(tmp_path / "images_background.zip", "w") as archive:
        archive.write(tmp_path / "images_evaluation/Beta/character01/01_01.png",
                      "images_background/Beta/character01/01_01.png")
        for c in (1, 2):
            archive.write(tmp_path / "images_evaluation/Beta/character01/01_01.png",
                          f"images_background/Gamma/character{c:02d}/x_01.png")
            archive.write(tmp_path / "images_evaluation/Beta/character01/01_02.png",
                          f"images_background/Gamma/character{c:02d}/x_02.png")
        archive.writestr("images_background/README.txt", "not a drawing")
    splits = build_dataset(config(dataset="omniglot", data_root=str(tmp_path)))
    check_splits(splits)
    assert splits.num_classes == 7 and len(splits.superclass_of.unique()) == 3
    assert len(splits.train) + len(splits.test.query) == 14
    # Alpha: characters 01, 02 train, 03 test; Beta and Gamma: 01 train, 02 test
    assert splits.num_train_classes == 4 and splits.superclass_of.tolist() == [0, 0, 1, 2, 0, 1, 2]
    assert all(splits.train[i][0].shape == (1, 16, 16) for i in range(len(splits.train)))


def test_omniglot_without_drawings(tmp_path, config):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetNotFoundError) as info:
        build_dataset(config(dataset="omniglot", data_root=str(tmp_path)))
    assert "characterNN" in str(info.value) and "images_background.zip" in str(info.value)


def test_rotated_drawings_are_numpy_rot90_of_the_drawing(tmp_path, config):
    """Bug: omniglot_rotations=4 labelled four classes per character but fed the same (or wrongly turned)
    pixels: drawing k * n + j must be np.rot90(drawing j, k), in the source and in the decoded cache."""
    from tests.xbm.data.conftest import make_drawings

    make_drawings(tmp_path, characters=2, drawers=2)
    plain = build_dataset(config(dataset="omniglot", data_root=str(tmp_path), image_size=24, augment="none"))
    turned = build_dataset(config(dataset="omniglot", data_root=str(tmp_path), image_size=24, augment="none",
                                  omniglot_rotations=4))
    n = len(plain.train.source)
    assert len(turned.train.source) == 4 * n and turned.num_classes == 4 * plain.num_classes
    for j in range(n):
        drawing = np.asarray(plain.train.source.load(j))
        decoded = np.asarray(plain.transforms.images(j))
        for k in range(4):
            assert np.array_equal(np.asarray(turned.train.source.load(k * n + j)), np.rot90(drawing, k))
            assert np.array_equal(np.asarray(turned.transforms.images(k * n + j)), np.rot90(decoded, k))


def test_a_characters_rotations_share_every_split(tmp_path, config):
    """Bug: a rotation of a character landed in another split than the character (the builder's train/test
    halves, or the validation classes under either val_by), so the model was scored on a character it trained
    on, turned; the four rotations are four classes of the character's alphabet."""
    from tests.xbm.data.conftest import make_drawings

    make_drawings(tmp_path, alphabets=("Alpha", "Beta", "Gamma"), characters=6, drawers=2)
    for val_by in ("class", "superclass"):
        splits = build_dataset(config(dataset="omniglot", data_root=str(tmp_path), omniglot_rotations=4,
                                      val_fraction=0.34, val_by=val_by))
        source = splits.train.source
        n = len(source.base)
        parts = {"train": splits.train, "val": splits.val.query, "test": splits.test.query}
        where = {}
        for name, part in parts.items():
            for j, label in zip(part.indices, part.labels.tolist()):
                character = int(j) % n // 2   # 2 drawings per character, in scan order
                where.setdefault(character, set()).add(name)
                assert int(splits.superclass_of[label]) == character // 6   # Alpha, Beta, Gamma: 6 characters each
        assert all(len(names) == 1 for names in where.values()) and len(where) == 18
        assert {"train", "val", "test"} == set().union(*where.values())
        # four classes per character, all in its alphabet
        labels = torch.cat([p.labels for p in parts.values()])
        assert len(labels.unique()) == 4 * 18 == splits.num_classes
        assert torch.equal(splits.superclass_of.bincount(), torch.full((3,), 24))
