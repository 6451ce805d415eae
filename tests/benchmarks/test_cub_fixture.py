"""benchmarks/cub_fixture.py: the synthetic CUB tree bench_gpu.py and bench_pipeline.py train on."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

path = Path(__file__).resolve().parents[2] / "benchmarks" / "cub_fixture.py"
spec = importlib.util.spec_from_file_location("cub_fixture", path)
fixture = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fixture)


def test_classes_split_evenly_between_the_training_and_test_halves():
    """cub200 trains on classes 1-100 and tests on 101-200: ids 1..n would leave the test split empty for
    any n <= 100, and the benchmark's evaluation would time nothing."""
    ids = fixture.class_ids(24)
    assert sorted(ids) == list(range(1, 13)) + list(range(101, 113))
    with pytest.raises(ValueError, match="even"):
        fixture.class_ids(7)


def test_the_project_reads_the_tree_as_cub200(tmp_path):
    """The tree is in the official layout the project's cub200 reader expects (images.txt,
    image_class_labels.txt, images/<class folder>/...): 48 images of 8 classes give 24 training images of
    4 classes and 24 test images of 4 classes; the other official files have one line per image/class."""
    from xbm.config import TrainConfig
    from xbm.data import build_dataset

    base = fixture.write_cub(tmp_path, 48, classes=8, size=(40, 30))
    splits = build_dataset(TrainConfig.from_dict({"dataset": "cub200", "data_root": str(tmp_path)}), images=False)
    assert len(splits.train) == 24 and splits.train.labels.unique().numel() == 4
    assert len(splits.test.query) == 24 and splits.test.query.labels.unique().numel() == 4
    assert len((base / "train_test_split.txt").read_text().splitlines()) == 48
    assert len((base / "classes.txt").read_text().splitlines()) == 8
    assert len(list((base / "images").rglob("*.jpg"))) == 48


def test_a_complete_tree_is_reused_and_an_incomplete_or_other_one_written_again(tmp_path, monkeypatch):
    """Bug caught: bench_gpu.py --keep DIR wrote CUB's 11,788 photos again on every run (23 s of a 10-minute
    GPU lease). A tree is reused only once its marker, written last, names the same arguments: one cut off
    while being written (no marker) or written with other arguments is written anew."""
    base, reused = fixture.ensure_cub(tmp_path, 16, classes=4, size=(40, 30))
    assert not reused and (base / fixture.COMPLETE).is_file()
    assert len(list((base / "images").rglob("*.jpg"))) == 16

    writes = []
    original = fixture.write_cub
    monkeypatch.setattr(fixture, "write_cub", lambda *a, **k: writes.append(a) or original(*a, **k))
    assert fixture.ensure_cub(tmp_path, 16, classes=4, size=(40, 30)) == (base, True) and writes == []

    (base / fixture.COMPLETE).unlink()   # a writer killed before its end: the photos may be half there
    (base / "images.txt").unlink()
    assert fixture.ensure_cub(tmp_path, 16, classes=4, size=(40, 30)) == (base, False) and len(writes) == 1
    assert (base / "images.txt").is_file() and (base / fixture.COMPLETE).is_file()

    _, reused = fixture.ensure_cub(tmp_path, 8, classes=4, size=(40, 30))   # other arguments
    assert not reused and len(writes) == 2
    assert len(list((base / "images").rglob("*.jpg"))) == 8   # none of the old tree's photos left over
