import pytest

from xbm.data import DATASETS, build_dataset
from xbm.errors import DatasetNotFoundError

ALL = ["sop", "inshop", "deepfashion2", "cifar10", "cifar100", "cub200", "cars196", "omniglot", "digits", "toy"]
FILE_BASED = [name for name in ALL if name not in ("digits", "toy")]


def test_registry_holds_every_data_set():
    assert sorted(DATASETS) == sorted(ALL)


def test_unknown_name_lists_the_valid_ones(config):
    with pytest.raises(ValueError) as info:
        build_dataset(config(dataset="imagenet"))
    assert "'imagenet'" in str(info.value) and all(name in str(info.value) for name in ALL)


@pytest.mark.parametrize("name", FILE_BASED)
def test_every_file_based_set_explains_an_empty_root(tmp_path, config, name):
    """One contract over the registry: an empty data_root names the data set, a path under it and a layout."""
    with pytest.raises(DatasetNotFoundError) as info:
        build_dataset(config(dataset=name, data_root=str(tmp_path)))
    message = str(info.value)
    assert f"'{name}'" in message and str(tmp_path) in message and "<data_root>/" in message
    assert "never downloads" in message or "download" in message.lower() or "put the release" in message
    assert isinstance(info.value, FileNotFoundError)
