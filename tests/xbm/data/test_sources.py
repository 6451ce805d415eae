import pickle
import zipfile

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
