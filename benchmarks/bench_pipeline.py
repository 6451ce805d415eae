"""Images/s one loader worker core delivers at 224 px, ``metric`` preset: uncached decode vs the decoded cache.

The benchmark writes synthetic 500x375 JPEG photos (CUB-200-2011's typical size) in the CUB layout into a
temporary folder, builds the ``cub200`` data set on it, and times, in this one process (one core, as one
DataLoader worker), the training item ``dataset[(i, seed)]`` (decode + random resized crop + flip +
ToTensor + normalisation) for three readers:

- **plain**: what a torchvision ``ImageFolder`` pipeline does: open, full JPEG decode, convert to RGB, then
  the transform on the full image (no pre-resize, no draft);
- **live**: this project without a cache: the same decode path as the cache (JPEG draft mode when the
  load size is at most half the image, short side to the load size), on every read;
- **cached**: ``image_cache=DIR``: pixels already decoded and resized, memory-mapped.

Side by side in one run, rounds rotated; medians. Target (issue 8): cached >= 2x plain at 224 px.
At 112 px the load size (128) is at most half of 375 - 1, so JPEG draft decoding applies to the live path.

    python benchmarks/bench_pipeline.py            # 400 photos, 224 and 112 px
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from PIL import Image

from cub_fixture import write_cub
from xbm.config import TrainConfig
from xbm.data import build_dataset
from xbm.data.cache import LiveImages, open_disk_cache


class Plain:
    """ImageFolder-style reading: full decode, transform on the full image."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __call__(self, j: int):
        with Image.open(self.dataset.source.root / self.dataset.source.relpaths[j]) as image:
            return image.convert("RGB")


def rate(dataset, reader, n: int) -> float:
    dataset.transforms.images = reader
    start = time.process_time()
    for i in range(n):
        dataset[(i % len(dataset), i)]
    return n / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_cub(root, args.images, classes=40)  # 20 training and 20 test classes
        for size in (224, 112):
            base = {"dataset": "cub200", "data_root": str(root), "image_size": size, "augment": "metric"}
            live = build_dataset(TrainConfig.from_dict(base))  # the preset's transforms; readers are swapped below
            train = live.train
            readers = {"plain": Plain(train)}
            load = int(size / 0.875)
            readers["live"] = LiveImages(train.source, live.style, load)
            start = time.perf_counter()
            readers["cached"] = open_disk_cache(root / "cache", {"dataset": "cub200", "load_size": load, "n": args.images},
                                                readers["live"], threads=1)
            built = time.perf_counter() - start
            rates = {name: [] for name in readers}
            names = list(readers)
            for r in range(args.rounds):
                for name in names[r % 3:] + names[: r % 3]:
                    rates[name].append(rate(train, readers[name], len(train)))
            med = {name: statistics.median(v) for name, v in rates.items()}
            print(f"{size} px (load size {load}): images/s per core: plain {med['plain']:.0f}, live {med['live']:.0f} "
                  f"({med['live'] / med['plain']:.2f}x), cached {med['cached']:.0f} ({med['cached'] / med['plain']:.2f}x "
                  f"plain, target >= 2x); cache built in {built:.1f} s for {len(train.source)} photos", flush=True)


if __name__ == "__main__":
    main()
