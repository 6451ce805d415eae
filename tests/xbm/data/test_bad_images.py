"""``on_bad_image``: a file that cannot be decoded is named (stop) or left out of the run (skip), and no
decoded cache holds it silently (xbm/data/bad_images.py, xbm/data/cache.py)."""
import json
import pickle
import shutil
import zipfile

import numpy as np
import pytest

from xbm import train_cli
from xbm.data import build_dataset, cache, images
from xbm.errors import BadImageError

from .conftest import make_drawings, truncate

RUN = ["dataset=omniglot", "model=mlp", "image_size=16", "embedding_size=8", "batch_size=8", "samples_per_class=2",
       "epochs=1", "warmup_epochs=0", "device=cpu", "num_workers=0", "lr=1e-3"]
OMNI = {"dataset": "omniglot", "samples_per_class": 2, "batch_size": 8}


@pytest.fixture
def drawings(tmp_path):
    """32 drawings (Alpha and Beta, 4 characters of 4 drawings; characters 01-02 train) and the truncated
    first one (Alpha character01, a training image)."""
    root = tmp_path / "omniglot"
    paths = make_drawings(root)
    return root, truncate(paths[0])


def _train(root, tmp_path, *values, capsys):
    sets = [a for v in RUN + [f"data_root={root}", *values] for a in ("--set", v)]
    code = train_cli.main([*sets, "--output", str(tmp_path / "run"), "--no-progress"])
    return code, capsys.readouterr().err


def test_stop_exits_2_naming_the_file_and_root(drawings, tmp_path, capsys):
    """Bug caught: a truncated PNG ending the run with exit 1 and "OSError: image file is truncated",
    without saying which of thousands of files is bad (issue 17)."""
    root, bad = drawings
    code, err = _train(root, tmp_path, capsys=capsys)
    assert code == 2
    assert str(bad) in err and f"data_root {root}" in err and "image file is truncated" in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_stop_while_decoding_live_in_a_loader_worker(drawings, tmp_path, capsys, monkeypatch):
    """Bug caught: a bad file met during training (live decoding, in a DataLoader worker, which rebuilds
    the error from its text) escaping as a crash (exit 1, a RuntimeError) instead of exit 2 naming it."""
    monkeypatch.setattr(cache, "MEMORY_BUDGET", 1)  # nothing packed: decoded per item, in the worker
    root, bad = drawings
    code, err = _train(root, tmp_path, "num_workers=1", "normalize=none", capsys=capsys)
    assert code == 2 and str(bad) in err.splitlines()[-1]


def test_skip_trains_without_the_file_and_counts_it(drawings, tmp_path, capsys):
    """Bug caught: skip crashing anyway, dropping the image without saying so, or not recording it in the
    epoch rows (skipped_images)."""
    root, bad = drawings
    with pytest.warns(UserWarning, match=r"1 image\(s\) of data set 'omniglot' cannot be decoded") as seen:
        code, _ = _train(root, tmp_path, "on_bad_image=skip", capsys=capsys)
    assert code == 0 and any(str(bad) in str(w.message) for w in seen)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["skipped_images"] for r in rows] == [1]


def _without_bad_file(root, bad, tmp_path):
    clean = tmp_path / "clean"
    shutil.copytree(root, clean)
    (clean / bad.relative_to(root)).unlink()
    return clean


def test_skip_pack_equals_a_fresh_decode_without_the_file(drawings, tmp_path, config, check_splits):
    """Bug caught: the in-memory pack holding the bad sample's garbage (or shifting every later image by
    one), or splits whose labels and indices no longer agree once a sample is dropped."""
    root, bad = drawings
    with pytest.warns(UserWarning):
        splits = build_dataset(config(**OMNI, data_root=str(root), on_bad_image="skip"))
    fresh = build_dataset(config(**OMNI, data_root=str(_without_bad_file(root, bad, tmp_path))))
    pack, clean = splits.transforms.images, fresh.transforms.images
    assert isinstance(pack, cache.PackedImages) and pack.skipped == (0,)
    assert np.array_equal(pack.pixels, clean.pixels)
    assert np.array_equal(np.delete(pack.shapes, 0, axis=0), clean.shapes)
    # 16 training drawings less the bad one; its class keeps 3; the test split is untouched
    assert len(splits.train) == 15 and splits.skipped_images == 1 and 0 not in splits.train.indices
    assert np.bincount(splits.train_labels.numpy()).tolist() == [3, 4, 4, 4]
    assert len(splits.test.query) == 16
    check_splits(splits)


def test_skip_with_live_decoding_finds_the_file_before_training(drawings, config, monkeypatch):
    """Bug caught: live decoding (data too large for memory, no image_cache) meeting the bad file only
    inside a training batch, where it can no longer be dropped from the split."""
    monkeypatch.setattr(cache, "MEMORY_BUDGET", 1)
    root, _ = drawings
    with pytest.warns(UserWarning):
        splits = build_dataset(config(**OMNI, data_root=str(root), on_bad_image="skip"))
    assert isinstance(splits.transforms.images, cache.LiveImages)
    assert splits.transforms.images.skipped == (0,) and len(splits.train) == 15


def test_disk_cache_records_skipped_files_and_is_not_reused_without_skip(drawings, tmp_path, config, monkeypatch):
    """Bug caught: an image_cache written under skip silently reused by a stop run (the bad file never
    reported), or reused after the file was repaired (the repaired image left out); a stop run that fails
    leaving a partial cache behind."""
    monkeypatch.setattr(cache, "MEMORY_BUDGET", 1)
    root, bad = drawings
    folder = tmp_path / "decoded"
    skip = config(**OMNI, data_root=str(root), on_bad_image="skip", image_cache=str(folder))
    with pytest.warns(UserWarning):
        pack = build_dataset(skip).transforms.images
    clean = build_dataset(config(**OMNI, data_root=str(_without_bad_file(root, bad, tmp_path)),
                                 image_cache=str(tmp_path / "decoded_clean"))).transforms.images
    assert isinstance(pack.pixels, np.memmap) and pack.skipped == (0,)
    assert np.array_equal(np.asarray(pack.pixels), np.asarray(clean.pixels))
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(BadImageError, match=str(bad)) as info:
        build_dataset(skip.replace(on_bad_image="stop"))
    assert pickle.loads(pickle.dumps(info.value)).path == str(bad)  # Ray ships it between processes
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written, no temporary left
    shutil.copy(root / "images_evaluation/Alpha/character01/01_02.png", bad)  # repaired
    images._kept.clear()  # another process: the disk cache is all it shares
    repaired = build_dataset(skip).transforms.images
    assert repaired.skipped == () and len(repaired.shapes) == 32 and tuple(repaired.shapes[0]) == (16, 16)


def test_skip_refuses_a_class_left_below_samples_per_class(drawings, config):
    """Bug caught: a training class quietly left with fewer images than the sampler draws per class."""
    root, _ = drawings
    for d in (2, 3):
        truncate(root / f"images_evaluation/Alpha/character01/01_{d:02d}.png")
    with pytest.warns(UserWarning, match="3 image"), pytest.raises(ValueError) as info:
        build_dataset(config(**OMNI, data_root=str(root), on_bad_image="skip"))
    message = str(info.value)
    assert "1 of its 4 images" in message and "samples_per_class=2" in message and "01_01.png" in message


def test_a_corrupt_zip_is_named(tmp_path, config):
    """Bug caught: a damaged Omniglot zip failing with zipfile's "File is not a zip file", naming no file."""
    make_drawings(tmp_path)
    archive = tmp_path / "images_background.zip"
    archive.write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(BadImageError, match=f"cannot read {archive} "):
        build_dataset(config(**OMNI, data_root=str(tmp_path)))


def test_a_bad_member_inside_a_zip_is_named_with_its_archive(tmp_path, config):
    """Bug caught: a truncated drawing inside a release zip named by neither the archive nor the member."""
    paths = make_drawings(tmp_path / "folder")
    archive = tmp_path / "omniglot" / "images_background.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as zf:
        for path in paths:
            data = path.read_bytes()
            zf.writestr(path.relative_to(tmp_path / "folder").as_posix(),
                        data[: len(data) // 2] if path == paths[5] else data)
    member = paths[5].relative_to(tmp_path / "folder").as_posix()
    with pytest.raises(BadImageError, match=f"{archive}:{member} "):
        build_dataset(config(**OMNI, data_root=str(archive.parent)))


def test_splits_built_without_images_refuse_a_reader_that_skipped(drawings, config):
    """Bug caught: ``Trainer(cfg, splits=...)`` with splits built before the bad files were found (e.g.
    ``build_dataset(cfg, images=False)``) training on the empty entry a skipped sample leaves in the pack."""
    root, _ = drawings
    splits = build_dataset(config(**OMNI, data_root=str(root)), images=False)
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="build them with build_dataset"):
        images.configure_images(splits, config(**OMNI, data_root=str(root), on_bad_image="skip"))
