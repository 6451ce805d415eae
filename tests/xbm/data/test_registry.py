import pytest

from xbm.data import DATASETS, build_dataset
from xbm.errors import DatasetNotFoundError

ALL = ["sop", "inshop", "vehicleid", "deepfashion2", "cifar10", "cifar100", "cub200", "cars196", "omniglot", "digits",
       "toy"]
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


def test_each_data_set_declares_its_papers_recall_at_k_set():
    """Bug caught: a data set reporting another benchmark's K (SOP's 100 and 1000 missing, In-Shop's 20-50,
    CUB/Cars' 2, 4, 8), or a data set without a K set (its runs would fail at the first evaluation)."""
    from xbm.data import RECALL_KS, recall_ks

    assert set(RECALL_KS) == set(DATASETS)
    assert recall_ks("cub200") == recall_ks("cars196") == (1, 2, 4, 8)
    assert recall_ks("sop") == (1, 10, 100, 1000)
    assert recall_ks("inshop") == (1, 10, 20, 30, 40, 50)
    assert recall_ks("vehicleid") == (1, 5)
    papers = ("cub200", "cars196", "sop", "inshop", "vehicleid")
    assert {recall_ks(name) for name in ALL if name not in papers} == {(1, 10)}
    with pytest.raises(ValueError, match="'imagenet'"):
        recall_ks("imagenet")
