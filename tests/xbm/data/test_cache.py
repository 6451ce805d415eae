"""Decoded images (xbm/data/cache.py): one decode path, three readers that must agree."""
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
from PIL import Image

from xbm.data import cache
from xbm.data.cache import LiveImages, decode, image_store, open_disk_cache, pack_in_memory
from xbm.data.sources import ArrayImageSource, ImageFileSource
from xbm.data.style import DARK_STROKES, PHOTO


def drawings(n=6, size=20):
    """Black strokes on white, as Omniglot's PNGs: a different stroke per image."""
    images = np.full((n, size, size), 255, dtype=np.uint8)
    for k in range(n):
        images[k, 2 + k: 4 + k, 3:15] = 0
    return ArrayImageSource(images)


def photos(tmp_path, sizes=((64, 48), (40, 60), (30, 30))):
    rng = np.random.default_rng(0)
    paths = []
    for k, (w, h) in enumerate(sizes):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(tmp_path / f"{k}.jpg", quality=95)
        paths.append(f"{k}.jpg")
    return ImageFileSource(tmp_path, paths)


def test_dark_strokes_decode_to_high_strokes_on_a_zero_background():
    """Bug caught: Omniglot entering with a white background (the collapse of issue 8)."""
    image = decode(drawings(), 0, DARK_STROKES, load_size=20)
    pixels = np.asarray(image)
    assert image.mode == "L" and pixels[0, 0] == 0 and pixels[2, 5] == 255
    assert (pixels == 0).mean() > 0.9


def test_decode_shrinks_the_short_side_to_the_load_size_and_never_enlarges():
    source = drawings(size=20)
    assert decode(source, 0, DARK_STROKES, load_size=10).size == (10, 10)
    assert decode(source, 0, DARK_STROKES, load_size=32).size == (20, 20)


def test_memory_pack_returns_exactly_the_live_decode(tmp_path):
    """Bug caught: a cache that changes pixels (offsets off by one, wrong shape, channels swapped)."""
    for source, style, load in ((drawings(), DARK_STROKES, 12), (photos(tmp_path), PHOTO, 32)):
        live = LiveImages(source, style, load)
        packed = pack_in_memory(live, threads=2)
        assert len(packed) == len(live)
        for j in range(len(live)):
            assert packed(j).mode == live(j).mode
            assert np.array_equal(np.asarray(packed(j)), np.asarray(live(j)))


def test_disk_cache_is_written_once_then_read_without_decoding(tmp_path, monkeypatch):
    """Bug caught: every trial re-decoding the data set, or a second reader seeing another layout."""
    source, folder = photos(tmp_path), tmp_path / "cache"
    key = {"dataset": "fixture", "load_size": 32}
    first = open_disk_cache(folder, key, LiveImages(source, PHOTO, 32), threads=1)
    calls = []
    monkeypatch.setattr(cache, "decode", lambda *a, **k: calls.append(a) or decode(*a, **k))
    second = open_disk_cache(folder, key, LiveImages(source, PHOTO, 32), threads=1)
    assert calls == []
    assert isinstance(second.pixels, np.memmap)
    for j in range(len(source)):
        expected = np.asarray(decode(source, j, PHOTO, 32))
        assert np.array_equal(np.asarray(second(j)), expected) and np.array_equal(np.asarray(first(j)), expected)
    assert [p.name for p in folder.iterdir() if not p.name.startswith(".")] == [f"fixture-32-{p.name.split('-')[-1]}"
                                                                                for p in folder.iterdir()
                                                                                if not p.name.startswith(".")]


def test_a_killed_writer_s_temporary_folder_is_removed_by_the_next_writer(tmp_path):
    """Bug caught: a writer killed mid-write (SIGKILL, an out-of-memory kill, a preempted node) never reaches its
    clean-up, and its partial cache (up to 31 GB for SOP) stayed on disk for good beside the finished one."""
    source, folder = photos(tmp_path), tmp_path / "cache"
    key = {"dataset": "fixture", "load_size": 32}
    open_disk_cache(folder, key, LiveImages(source, PHOTO, 32), threads=1)
    final = next(p for p in folder.iterdir() if not p.name.startswith("."))
    killed = folder / f"{final.name}.tmp-999999"
    killed.mkdir()
    (killed / "pixels.u8").write_bytes(b"partial")
    for part in final.iterdir():   # the finished cache no longer fits its key: written again
        part.unlink()
    final.rmdir()
    open_disk_cache(folder, key, LiveImages(source, PHOTO, 32), threads=1)
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == [final.name]


def test_decoding_threads_run_a_bounded_window_ahead_of_a_slow_consumer():
    """Bug caught: ``Executor.map`` submits every image at once, so while the disk cache's writer (a slow disk,
    NFS) lagged, every decoded image waited in memory: gigabytes for SOP. At most AHEAD_PER_THREAD per thread."""
    import threading
    import time

    started, lock = [], threading.Lock()

    def decode_one(j):
        with lock:
            started.append(j)
        return j

    results = cache._threaded(decode_one, 200, threads=2)
    assert next(results) == 0
    time.sleep(0.3)   # the consumer lags; the threads are long done with what they were given
    assert len(started) <= 2 * cache.AHEAD_PER_THREAD + 1
    assert list(results) == list(range(1, 200)) and len(started) == 200


def test_image_store_keeps_small_sets_in_memory_and_large_ones_on_disk_or_live(tmp_path):
    source = photos(tmp_path)
    assert isinstance(image_store(source, PHOTO, 32, {"dataset": "f", "load_size": 32}), cache.PackedImages)
    live = image_store(source, PHOTO, 32, {"dataset": "f", "load_size": 32}, budget=10)
    assert isinstance(live, LiveImages)
    disk = image_store(source, PHOTO, 32, {"dataset": "f", "load_size": 32}, cache_dir=str(tmp_path / "c"), budget=10)
    assert isinstance(disk.pixels, np.memmap)


def test_jpeg_draft_decodes_at_least_the_asked_size_and_scales_boxes(tmp_path):
    """Bug caught: draft mode returning an image smaller than the load size, or boxes left unscaled."""
    rng = np.random.default_rng(2)
    Image.fromarray(rng.integers(0, 256, (400, 600, 3), dtype=np.uint8)).save(tmp_path / "big.jpg")
    full = ImageFileSource(tmp_path, ["big.jpg"]).load(0)
    drafted = ImageFileSource(tmp_path, ["big.jpg"]).load(0, min_size=100)
    assert full.size == (600, 400) and drafted.size == (150, 100)
    boxed = ImageFileSource(tmp_path, ["big.jpg"], boxes=np.array([[100, 100, 500, 300]]))
    assert boxed.load(0).size == (400, 200)
    small = boxed.load(0, min_size=50)  # box short side 200 -> draft by 1/4 keeps it at 50
    assert small.size == (100, 50)
    assert ImageFileSource(tmp_path, ["big.jpg"]).load(0, min_size=300).size == (600, 400)  # < 2x: no draft


def test_packed_images_of_grey_and_rgb_keep_their_shapes():
    packed = pack_in_memory(LiveImages(drawings(n=3, size=9), DARK_STROKES, 9))
    assert packed.array(2).shape == (9, 9) and packed.nbytes == 3 * 81
    with pytest.raises(IndexError):
        packed.shapes[3]


@pytest.mark.parametrize("allowed, threads", [({0}, 1), (set(range(3)), 3), (set(range(32)), 8)])
def test_decode_threads_follow_the_processes_cpus_up_to_8(monkeypatch, allowed, threads):
    """Bug caught: the decode pool sized by the machine's core count (``os.cpu_count()``), so a job pinned
    to one core of a 64-core node (taskset, SLURM) starts 8 decoding threads that fight over it."""
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: allowed)
    used = []
    monkeypatch.setattr(cache, "pack_in_memory", lambda images, n, skip: used.append(n) or images)
    image_store(drawings(), DARK_STROKES, 12, {"n": 6})
    assert used == [threads]


def _big_drawings(n=24, size=256):
    """Dark strokes on white, 1.5 MiB decoded: more than a worker may receive (1 MiB)."""
    images = np.full((n, size, size), 255, dtype=np.uint8)
    for k in range(n):
        images[k, k: k + 9, 3: size - k] = k
    return ArrayImageSource(images)


def _same_pixels(a, b):
    assert len(a) == len(b) and a.skipped == b.skipped
    for j in range(len(a)):
        assert a(j).mode == b(j).mode and np.array_equal(np.asarray(a(j)), np.asarray(b(j)))


def test_an_in_memory_pack_reaches_a_worker_by_handle_with_the_same_pixels():
    """Bug caught: the pack's pixels pickled into every spawned or forkserver worker (2.9 GB, 15 times), or a
    handle that rebuilds other pixels; a checkpoint or Ray copy must still carry the pixels themselves."""
    packed = pack_in_memory(LiveImages(_big_drawings(), DARK_STROKES, 256))
    assert packed.nbytes > 2**20
    received = ForkingPickler.loads(ForkingPickler.dumps(packed))
    assert len(ForkingPickler.dumps(packed)) < 8192
    _same_pixels(received, packed)
    by_value = pickle.dumps(packed)
    assert len(by_value) > packed.nbytes
    _same_pixels(pickle.loads(by_value), packed)


def test_the_disk_cache_pickles_as_its_folder_and_is_mapped_again(tmp_path):
    """Bug caught: a memmap pickles as an array of its values, so every worker got the whole cache file's
    contents (np.memmap keeps no path when pickled)."""
    source = _big_drawings()
    live = LiveImages(source, DARK_STROKES, 256)
    disk = open_disk_cache(tmp_path / "cache", {"dataset": "f", "load_size": 256}, live, threads=1)
    assert disk.nbytes > 2**20
    for pickler in (ForkingPickler, pickle):
        data = pickler.dumps(disk)
        received = pickler.loads(data)
        assert len(data) < 4096 and isinstance(received.pixels, np.memmap)
        _same_pixels(received, disk)


def test_a_worker_refuses_a_disk_cache_rewritten_since_the_run_opened_it(tmp_path):
    """Bug caught: a worker opening by path a cache another run has rewritten meanwhile (on_bad_image=skip, a
    repaired file decodes now), whose offsets no longer match the run's samples: other images, silently."""
    source, folder, key = photos(tmp_path), tmp_path / "cache", {"dataset": "f", "load_size": 32}
    disk = open_disk_cache(folder, key, LiveImages(source, PHOTO, 32), threads=1)
    data = pickle.dumps(disk)
    disk.folder.rename(disk.folder.with_name("old"))   # kept: its inode cannot be reused by the new index
    open_disk_cache(folder, key, LiveImages(source, PHOTO, 32), threads=1)
    with pytest.raises(ValueError, match="must be the one this run opened.*rewritten"):
        pickle.loads(data)


def _lock_file(folder):
    locks = [p for p in folder.iterdir() if p.name.endswith(".lock")]
    assert len(locks) == 1, locks
    return locks[0]


def test_a_writer_waits_while_another_holds_the_cache_s_lock(tmp_path, monkeypatch):
    """Bug caught: the cache's writer not taking the lock another writer holds (its lock file renamed, the lock
    dropped before the check, a timeout that gives up and writes anyway), so two trials decode the data set
    into one cache at once and one's rename races the other's clean-up. Held here as another trial would:
    ``filelock`` on the same file (an exclusive ``flock`` on Linux, what older copies took by hand)."""
    import threading
    import time

    from filelock import FileLock

    source, folder, key = photos(tmp_path), tmp_path / "cache", {"dataset": "f", "load_size": 32}
    final = open_disk_cache(folder, key, LiveImages(source, PHOTO, 32), threads=1).folder
    for part in final.iterdir():   # gone: the next writer must write it again
        part.unlink()
    final.rmdir()
    calls = []
    monkeypatch.setattr(cache, "decode", lambda *a, **k: calls.append(a[1]) or decode(*a, **k))
    other = FileLock(_lock_file(folder))
    other.acquire()
    writer = threading.Thread(target=open_disk_cache, args=(folder, key, LiveImages(source, PHOTO, 32), 1))
    try:
        writer.start()
        time.sleep(0.5)
        assert writer.is_alive() and calls == [] and not final.exists()   # waiting, nothing decoded
    finally:
        other.release()
    writer.join(timeout=60)
    assert not writer.is_alive() and sorted(calls) == list(range(len(source))) and (final / "index.npz").is_file()


def test_two_writers_at_once_decode_the_data_set_once(tmp_path, monkeypatch):
    """Bug caught: two trials starting together both finding no cache and both decoding the data set (twice
    the time; up to 31 GB written twice for SOP); the lock must cover the check and the write, so the second
    waits, then finds the first's cache whole and reuses it."""
    import threading
    import time

    source, folder, key = photos(tmp_path), tmp_path / "cache", {"dataset": "f", "load_size": 32}
    calls, start = [], threading.Barrier(2)

    def slow_decode(*args, **kwargs):
        calls.append(args[1])
        time.sleep(0.05)   # a writer is still decoding when the other checks for the cache
        return decode(*args, **kwargs)

    monkeypatch.setattr(cache, "decode", slow_decode)
    opened = [None, None]

    def trial(i):
        start.wait()
        opened[i] = open_disk_cache(folder, key, LiveImages(source, PHOTO, 32), threads=1)

    trials = [threading.Thread(target=trial, args=(i,)) for i in range(2)]
    for t in trials:
        t.start()
    for t in trials:
        t.join(timeout=60)
    assert sorted(calls) == list(range(len(source)))   # once, by one of them
    _same_pixels(opened[0], opened[1])
