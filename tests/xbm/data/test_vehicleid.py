from collections import OrderedDict

import pytest
import torch

from xbm.data import build_dataset, images, recall_ks
from xbm.errors import DatasetNotFoundError

# vehicle_id -> image ids; vehicles 1-4 train, 5-8 test. Image ids are interleaved (a test image between training
# ones), so that only a reader that follows the lists, not the folder's order, finds the right images.
TRAIN = {1: [2, 5], 2: [7, 8, 30], 3: [11, 12], 4: [14, 3]}
TEST = {5: [1, 4], 6: [9, 10, 31], 7: [13, 15], 8: [16, 17]}
# the official lists' vehicles: small, medium, large (nested, as the release's are)
TEST_VEHICLES = {800: [5, 6], 1600: [5, 6, 7], 2400: [5, 6, 7, 8]}


def image_name(image: int) -> str:
    return f"{image:07d}"


def listed(size: int) -> list[tuple[int, int]]:
    """(image, vehicle) rows of the fixture's test list ``size``, in file order."""
    return [(image, vehicle) for vehicle in TEST_VEHICLES[size] for image in TEST[vehicle]]


def make_vehicleid(root, write_image, wrapper=""):
    """PKU VehicleID's layout: ``image/<image_id>.jpg`` and ``train_test_split/`` lists. Every pixel of an image is
    its id (write_image's value 257 x id: a uniform image, which JPEG stores exactly)."""
    base = root / wrapper if wrapper else root
    for vehicles in (TRAIN, TEST):
        for images_of in vehicles.values():
            for image in images_of:
                write_image(base / "image" / f"{image_name(image)}.jpg", value=257 * image)
    lists = {"train_list.txt": [(i, v) for v, ims in TRAIN.items() for i in ims]}
    lists.update({f"test_list_{size}.txt": listed(size) for size in TEST_VEHICLES})
    (base / "train_test_split").mkdir(parents=True)
    for name, rows in lists.items():
        (base / "train_test_split" / name).write_text("".join(f"{image_name(i)} {v:04d}\n" for i, v in rows))
    return base


def _ids(dataset) -> list[int]:
    """The image id of every sample, read from its file name."""
    return [int(dataset.source.relpaths[int(j)][len("image/"):-len(".jpg")]) for j in dataset.indices]


@pytest.mark.parametrize("size", [800, 1600, 2400])
def test_each_test_list_is_the_test_split(tmp_path, write_image, config, check_splits, size):
    """Bug caught: a test size reading another list (or all of them), the list's images paired with other
    vehicles' labels or files, or test vehicles leaking into training."""
    make_vehicleid(tmp_path, write_image)
    splits = build_dataset(config(dataset="vehicleid", data_root=str(tmp_path), vehicleid_test_size=size))
    check_splits(splits)   # includes: test classes disjoint from the training classes
    assert splits.test.gallery is None, "leave-one-out retrieval on the test list"
    assert _ids(splits.train) == [i for ims in TRAIN.values() for i in ims]
    rows = listed(size)
    assert _ids(splits.test.query) == [image for image, _ in rows]
    labels = splits.test.query.labels.tolist()
    # one label per vehicle, distinct between vehicles
    assert len(set(zip(labels, (v for _, v in rows)))) == len(set(labels)) == len(TEST_VEHICLES[size])
    assert splits.num_classes == len(TRAIN) + len(TEST_VEHICLES[size])
    # the pixels are the listed image's
    k = len(rows) - 1
    assert splits.test.query.source.load(int(splits.test.query.indices[k])).getpixel((3, 3)) == (rows[k][0],) * 3


def test_the_small_test_list_is_the_default_and_recall_at_1_and_5_are_reported(tmp_path, write_image, config):
    """Bug caught: the default evaluating the large list (XBM Table 1's first VehicleID column is the small one),
    or VehicleID reporting another benchmark's K instead of its papers' Recall@1 and @5."""
    make_vehicleid(tmp_path, write_image, "VehicleID_V1.0")   # the release's folder under data_root
    splits = build_dataset(config(dataset="vehicleid", data_root=str(tmp_path)))
    assert _ids(splits.test.query) == [image for image, _ in listed(800)]
    assert recall_ks("vehicleid") == (1, 5)


def test_validation_classes_come_from_the_training_vehicles(tmp_path, write_image, config, check_splits):
    """Bug caught: validation vehicles drawn from the test list, or the test list shrinking with val_fraction."""
    make_vehicleid(tmp_path, write_image)
    splits = build_dataset(config(dataset="vehicleid", data_root=str(tmp_path), val_fraction=0.5))
    check_splits(splits)
    assert set(_ids(splits.train) + _ids(splits.val.query)) == {i for ims in TRAIN.values() for i in ims}
    assert splits.train_labels.unique().numel() == 2 and len(splits.test.query) == len(listed(800))


@pytest.mark.parametrize("missing", ["train_test_split/train_list.txt", "train_test_split/test_list_800.txt",
                                     "train_test_split/test_list_2400.txt"])
def test_a_missing_list_is_named_with_the_layout(tmp_path, write_image, config, missing):
    """Bug caught: an incomplete release failing with a bare KeyError or FileNotFoundError, or naming no file."""
    make_vehicleid(tmp_path, write_image)
    (tmp_path / missing).unlink()
    with pytest.raises(DatasetNotFoundError) as info:
        build_dataset(config(dataset="vehicleid", data_root=str(tmp_path)))
    message = str(info.value)
    assert str(tmp_path / missing) in message and "'vehicleid'" in message and "test_list_1600.txt" in message


def test_missing_images_fail_early(tmp_path, write_image, config):
    """Bug caught: the lists present but image/ not extracted, found only at the first batch."""
    make_vehicleid(tmp_path, write_image)
    (tmp_path / "image" / f"{image_name(2)}.jpg").unlink()
    with pytest.raises(DatasetNotFoundError, match="extract"):
        build_dataset(config(dataset="vehicleid", data_root=str(tmp_path)))


def test_a_malformed_line_or_a_test_vehicle_in_training_is_refused(tmp_path, write_image, config):
    """Bug caught: a list with a third column or a non-numeric vehicle read with shifted fields, or a test list
    whose vehicles are also trained on (retrieval then measures memorisation)."""
    make_vehicleid(tmp_path, write_image)
    lists = tmp_path / "train_test_split"
    test_800 = (lists / "test_list_800.txt").read_text()
    (lists / "test_list_800.txt").write_text(test_800 + "0000099 car\n")
    with pytest.raises(ValueError, match=r"test_list_800.txt must be '<image_id> <vehicle_id>'.*0000099 car"):
        build_dataset(config(dataset="vehicleid", data_root=str(tmp_path)))
    (lists / "test_list_800.txt").write_text(test_800)
    with open(lists / "train_list.txt", "a") as handle:
        handle.write("0000099 0005\n")
    with pytest.raises(ValueError, match="test vehicles must not be training vehicles.*vehicle_id 5"):
        build_dataset(config(dataset="vehicleid", data_root=str(tmp_path)))


def test_test_sizes_in_one_process_read_their_own_pixels(tmp_path, write_image, config, monkeypatch):
    """Bug caught: the decoded images are kept per process by data set and root, not by test list, so a sweep
    over vehicleid_test_size in one Ray actor would read the small list's reader for the large list (wrong
    pixels, or indices past its end) unless the samples are the same whatever the list."""
    monkeypatch.setattr(images, "_kept", OrderedDict())
    make_vehicleid(tmp_path, write_image)
    for size in (800, 2400):
        splits = build_dataset(config(dataset="vehicleid", data_root=str(tmp_path), vehicleid_test_size=size,
                                      augment="none", normalize="none"))
        query = splits.test.query
        for k, (image, _) in enumerate(listed(size)):
            x = query[k][0]   # through the kept reader and the eval transform
            assert x.dtype == torch.uint8 and int(x[0, 5, 5]) == image, f"size {size}: query {k}"
