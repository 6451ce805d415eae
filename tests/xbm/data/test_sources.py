import pickle
import zipfile
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from xbm.data.base import SampleDataset, Transforms
from xbm.data.sources import ArrayImageSource, ImageFileSource, VectorSource, ZipImageSource
from xbm.errors import DatasetNotFoundError


def test_vector_source_rows():
    source = VectorSource(torch.arange(6, dtype=torch.float64).reshape(3, 2))
    assert len(source) == 3 and source.load(2).tolist() == [4.0, 5.0] and source.load(0).dtype == torch.float32
    with pytest.raises(ValueError, match="2-D"):
        VectorSource(torch.zeros(3))


def test_array_source_grey_and_rgb():
    grey = ArrayImageSource(np.full((2, 4, 5), 7, dtype=np.uint8))
    assert grey.load(1).size == (5, 4) and grey.load(1).getpixel((0, 0)) == (7, 7, 7)
    with pytest.raises(ValueError, match="uint8"):
        ArrayImageSource(np.zeros((2, 4, 5), dtype=np.float32))


def test_file_source_crops_and_reports_missing_images(tmp_path, write_image):
    write_image(tmp_path / "a.png", size=(20, 10), value=3)
    source = ImageFileSource(tmp_path, ["a.png", "b.png"], boxes=np.array([[2, 3, 12, 8], [0, 0, 1, 1]]),
                             dataset="demo", layout="<data_root>/\n  a.png")
    assert source.load(0).size == (10, 5)
    with pytest.raises(DatasetNotFoundError) as info:
        source.load(1)
    assert str(tmp_path / "b.png") in str(info.value) and "'demo'" in str(info.value)
    with pytest.raises(ValueError, match="one row per image"):
        ImageFileSource(tmp_path, ["a.png"], boxes=np.zeros((2, 4)))


def make_zip_source(tmp_path, write_image):
    for k in range(4):
        write_image(tmp_path / f"{k}.png", size=(5, 5), value=40 * k)
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as archive:
        for k in range(4):
            archive.write(tmp_path / f"{k}.png", f"set/{k}.png")
    return ZipImageSource([str(tmp_path / "a.zip"), None], np.array([0, 0, 0, 1]),
                          ["set/0.png", "set/1.png", "set/2.png", str(tmp_path / "3.png")])


def test_zip_source_reads_members_and_plain_files(tmp_path, write_image):
    source = make_zip_source(tmp_path, write_image)
    assert [source.load(k).getpixel((2, 2)) for k in (2, 3)] == [(80, 80, 80), (120, 120, 120)]
    clone = pickle.loads(pickle.dumps(source))  # handles are dropped and reopened
    assert clone._handles == {} and clone.load(1).getpixel((1, 1)) == (40, 40, 40)


def test_zip_source_in_dataloader_workers(tmp_path, write_image):
    source = make_zip_source(tmp_path, write_image)
    source.load(0)  # the parent holds an open handle before the workers start
    transforms = Transforms(4)
    dataset = SampleDataset(source, np.arange(4), np.array([0, 0, 1, 1]), transforms, "eval")
    batches = list(DataLoader(dataset, batch_size=2, num_workers=1))
    assert torch.cat([b[2] for b in batches]).tolist() == [0, 1, 2, 3]
    assert torch.cat([b[0] for b in batches]).shape == (4, 3, 4, 4)


def _small_in_a_worker(source):
    """``source`` as a spawned worker receives it (ForkingPickler), and how many bytes that took."""
    data = ForkingPickler.dumps(source)
    return ForkingPickler.loads(data), len(data)


def test_every_source_reaches_a_worker_small_whatever_its_size(tmp_path, write_image):
    """Bug caught: a source pickling its arrays or path lists by value into every spawned worker: decoded
    images (digits, CIFAR: 184 MB), SOP's 120k paths, Omniglot's zip members, the boxes, the vectors."""
    images = np.random.default_rng(0).integers(0, 256, (40, 256, 256), dtype=np.uint8)   # 2.5 MiB
    arrays, size = _small_in_a_worker(ArrayImageSource(images))
    assert size < 8192 and np.array_equal(arrays.images, images)
    assert arrays.load(39) == ArrayImageSource(images).load(39)
    vectors = torch.randn(50_000, 16)   # 3 MiB
    received, size = _small_in_a_worker(VectorSource(vectors))
    assert size < 8192 and torch.equal(received.vectors, vectors)
    write_image(tmp_path / "a.png", size=(20, 10), value=3)
    paths = ["a.png"] + [f"folder/{k:09d}.jpg" for k in range(60_000)]
    boxes = np.random.default_rng(1).random((len(paths), 4)) + [0, 0, 4, 4]
    files, size = _small_in_a_worker(ImageFileSource(tmp_path, paths, boxes=boxes))
    assert size < 8192 and list(files.relpaths) == paths and np.array_equal(files.boxes, boxes)
    assert np.array_equal(np.asarray(files.load(0)), np.asarray(ImageFileSource(tmp_path, paths, boxes=boxes).load(0)))
    members = [f"images_background/A/character01/{k:07d}_01.png" for k in range(60_000)]
    zips, size = _small_in_a_worker(ZipImageSource(["a.zip", None], np.arange(60_000) % 2, members))
    assert size < 8192 and list(zips.members) == members
    assert np.array_equal(zips.archive_of, np.arange(60_000) % 2)


def test_a_vector_source_s_move_to_shared_memory_leaves_the_caller_s_tensor_alone():
    """Bug caught: a source holding the caller's own tensor: a spawned worker receiving it moves that storage into
    shared memory, and a NumPy view the caller kept of it reads freed memory."""
    vectors = torch.randn(500_000, 4)
    view = vectors.numpy()
    ForkingPickler.dumps(VectorSource(vectors))
    assert not vectors.is_shared() and view.ctypes.data == vectors.data_ptr()
