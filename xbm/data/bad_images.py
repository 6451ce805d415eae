"""``on_bad_image=skip``: images whose files cannot be decoded leave the run, said once, never silently.

The decoded-image reader finds them (:mod:`xbm.data.cache`: while packing, or in one decode pass up front
for live decoding); :func:`without_samples` then drops them from the builder's parts before the splits are
assembled, so labels, class counts, samplers and the validation classes are those of the data without them.
"""
from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Optional, Sequence

import numpy as np

from xbm.config import ON_BAD_IMAGE
from xbm.data.base import RawData
from xbm.data.sources import SampleSource

SHOWN_PATHS = 5


def stamp(source: SampleSource, j: int) -> list:
    """[j, size, mtime_ns] of sample ``j``'s file (None, None: unreadable or in memory): a cache that skipped
    the sample is reused only while this is unchanged (a replaced file may now decode)."""
    path: Optional[str] = source.file_of(j)
    try:
        stat = os.stat(path) if path else None
    except OSError:
        stat = None
    return [j, stat.st_size, stat.st_mtime_ns] if stat else [j, None, None]


def unchanged(source: SampleSource, stamps: Sequence[list]) -> bool:
    return all(stamp(source, int(s[0])) == list(s) for s in stamps)


def warn_skipped(dataset: str, source: SampleSource, skipped: Sequence[int]) -> None:
    """One warning for the whole data set: the count and the first :data:`SHOWN_PATHS` files."""
    if not skipped:
        return
    shown = ", ".join(source.where(j) for j in skipped[:SHOWN_PATHS])
    more = f" and {len(skipped) - SHOWN_PATHS} more" if len(skipped) > SHOWN_PATHS else ""
    warnings.warn(f"on_bad_image=skip: {len(skipped)} image(s) of data set {dataset!r} cannot be decoded and "
                  f"are left out of this run: {shown}{more}", stacklevel=2)


def without_samples(raw: RawData, skipped: Sequence[int], min_per_class: int) -> tuple[RawData, int]:
    """``raw`` without the samples ``skipped``, and how many of its training, query and gallery images
    that removed. A training class that had at least ``min_per_class`` images (the sampler's
    samples_per_class; 0: no rule) and now has fewer is an error naming one of its bad files."""
    bad = np.asarray(sorted(skipped), dtype=np.int64)
    if not len(bad):
        return raw, 0
    parts = [np.asarray(p, dtype=np.int64) for p in (raw.train, raw.query, raw.gallery) if p is not None]
    removed = int(np.isin(np.unique(np.concatenate(parts)), bad).sum())
    labels = np.asarray(raw.labels, dtype=np.int64)

    def keep(part):
        return None if part is None else np.asarray(part, dtype=np.int64)[~np.isin(part, bad)]
    train = keep(raw.train)
    if min_per_class > 0:
        before = np.bincount(labels[np.asarray(raw.train, dtype=np.int64)], minlength=labels.max() + 1)
        after = np.bincount(labels[train], minlength=labels.max() + 1)
        short = np.flatnonzero((before >= min_per_class) & (after < min_per_class))
        if len(short):
            c = int(short[0])
            example = raw.source.where(int(bad[labels[bad] == c][0]))
            raise ValueError(f"{raw.name}: on_bad_image=skip leaves a training class with {after[c]} of its "
                             f"{before[c]} images (e.g. {example} cannot be decoded), but the sampler draws "
                             f"samples_per_class={min_per_class} per class: replace the bad files or lower "
                             "samples_per_class")
    return dataclasses.replace(raw, train=train, query=keep(raw.query), gallery=keep(raw.gallery)), removed
