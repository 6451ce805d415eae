"""Arrays that loader workers map instead of copying (xbm/data/shared.py)."""
import copy
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from xbm.data.shared import SharedArray, StringTable
from xbm.errors import SharedMemoryError

MiB = 2**20


def test_a_worker_receives_a_handle_and_any_other_pickler_the_values():
    """Bug caught: an array pickled by value into every spawned worker (a 2.9 GB pack, once per worker), or,
    the other way round, a checkpoint or Ray object holding a handle that means nothing in another process."""
    values = np.arange(2 * MiB // 8, dtype=np.int64)
    shared = SharedArray(values)
    assert len(pickle.dumps(shared)) > values.nbytes and not shared.is_shared   # by value: nothing moved
    assert np.array_equal(copy.deepcopy(shared).array, values)
    assert len(ForkingPickler.dumps(shared)) < 4096 and shared.is_shared
    clone = pickle.loads(pickle.dumps(shared))
    assert not clone.is_shared and np.array_equal(clone.array, values)


def test_a_worker_maps_the_same_memory_holding_the_same_values():
    """Bug caught: a handle that rebuilds other values (dtype, shape or order lost) or a private copy."""
    values = np.random.default_rng(0).random((300, 7))
    shared = SharedArray(values)
    mapped = ForkingPickler.loads(ForkingPickler.dumps(shared))
    assert mapped.is_shared and mapped.array.dtype == np.float64 and np.array_equal(mapped.array, values)
    mapped.array[0, 0] = -1.0   # the same pages, not a copy
    assert shared.array[0, 0] == -1.0


def test_the_values_move_once_and_the_array_views_the_shared_tensor():
    """Bug caught: viewing a torch tensor in NumPy and then calling share_memory_ on it: torch swaps the tensor's
    data pointer and the view reads freed memory; or a new copy into shared memory at every worker's pickle."""
    shared = SharedArray(np.arange(1000, dtype=np.int32))
    ForkingPickler.dumps(shared)
    tensor = shared.share()
    assert shared.array.ctypes.data == tensor.data_ptr() and tensor.is_shared()
    ForkingPickler.dumps(shared)
    assert shared.share() is tensor and shared.array.ctypes.data == tensor.data_ptr()
    assert np.array_equal(shared.array, np.arange(1000))


def test_an_empty_array_travels_too():
    shared = SharedArray(np.zeros((0, 2), dtype=np.int64))
    assert ForkingPickler.loads(ForkingPickler.dumps(shared)).array.shape == (0, 2)


class Holder(Dataset):
    def __init__(self, shared):
        self.shared = shared

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return int(self.shared.array[i])


def test_forked_workers_move_nothing_to_shared_memory():
    """Bug caught: values moved to /dev/shm when no worker needs them (fork pickles nothing): Docker gives a
    container 64 MB there, and a 2 GiB in-memory pack moved there fails."""
    values = np.arange(4, dtype=np.int64)
    shared = SharedArray(values)
    loader = DataLoader(Holder(shared), batch_size=2, num_workers=2, multiprocessing_context="fork")
    assert torch.cat(list(loader)).tolist() == [0, 1, 2, 3]
    assert shared.array is values and not shared.is_shared


def test_a_dtype_torch_cannot_hold_is_refused():
    with pytest.raises(ValueError, match="dtype torch can hold.*<U1"):
        SharedArray(np.array(["a", "b"]))


def test_no_room_in_shared_memory_says_what_to_do(monkeypatch):
    """Bug caught: torch's bare "unable to allocate shared memory" with nothing about the container's /dev/shm,
    the start method or num_workers."""
    def full(self):
        raise RuntimeError("unable to allocate shared memory(shm) for file </torch_1>")
    monkeypatch.setattr(torch.Tensor, "share_memory_", full)
    with pytest.raises(SharedMemoryError, match=r"2 MiB .*shm-size.*fork.*num_workers=0"):
        ForkingPickler.dumps(SharedArray(np.zeros(2 * MiB, np.uint8)))


def test_a_string_table_returns_every_string_exactly():
    """Bug caught: paths mangled by the packing (non-ASCII names, names that are not UTF-8, empty strings)."""
    strings = ["a.jpg", "dossier/été.png", "bad\udcff.png", "", "汉字/x.jpg"]
    table = StringTable(strings)
    assert list(table) == strings and len(table) == 5 and table[-1] == strings[-1] and table[1:3] == strings[1:3]
    for pickler in (pickle, ForkingPickler):
        assert list(pickler.loads(pickler.dumps(table))) == strings
    with pytest.raises(IndexError, match="5 out of range for a table of 5"):
        table[5]
    assert list(StringTable([])) == []


def test_a_long_string_table_reaches_a_worker_small():
    """Bug caught: SOP's 120,053 relative paths pickled as a list into every worker (about 5 MB each)."""
    paths = [f"bicycle_final/{k:012d}_0.JPG" for k in range(120_053)]
    assert len(pickle.dumps(paths)) > 4 * MiB
    table = StringTable(paths)
    received = ForkingPickler.loads(ForkingPickler.dumps(table))
    assert len(ForkingPickler.dumps(table)) < 4096 and received[120_052] == paths[-1] and len(received) == len(paths)
