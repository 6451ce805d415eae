"""Progress bars from a Ray worker, drawn on the driver's terminal: rank 0's bars in ``xbm-tune train --workers N``.

A worker's stdout and stderr are files that Ray's log monitor forwards line by line, never a terminal: tqdm's
own bar would be disabled there (``disable=None``) or, forced on, its carriage returns would pile up into one
line. Ray's ``ray.experimental.tqdm_ray.tqdm`` prints the bar's state as a line the driver recognises and
draws with tqdm instead. So the driver decides (:func:`driver_draws_bars`: ``--no-progress``, or its stderr not
a terminal, means no bar anywhere) and rank 0 draws through Ray (:func:`ray_bars`), with the same rule as
``xbm.runtime.progress``: a pass gets its bar only once it has lasted ``delay_s``.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, Iterable, Iterator, Optional, TextIO


def driver_draws_bars(enabled: bool, stream: Optional[TextIO] = None) -> bool:
    """Whether the driver shows bars: ``enabled`` (not ``--no-progress``) and ``stream`` (default: stderr, where
    tqdm draws) a terminal."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(enabled) and callable(isatty) and bool(isatty())


class DelayedBar:
    """Yields every item of ``batches``; once ``delay_s`` seconds have passed, a bar ``make(desc=..., total=...)``
    counts the items yielded so far and each after it, and is closed when the pass ends (or is left)."""

    def __init__(self, batches: Iterable, desc: str, make: Callable[..., Any], delay_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if delay_s < 0:
            raise ValueError(f"delay_s must be >= 0 seconds, but got {delay_s}")
        self.batches, self.desc, self.make, self.delay_s, self.clock = batches, desc, make, delay_s, clock

    def __iter__(self) -> Iterator:
        started, bar, done = self.clock(), None, 0
        try:
            for item in self.batches:
                yield item
                done += 1
                if bar is not None:
                    bar.update(1)
                elif self.clock() - started >= self.delay_s:
                    bar = self.make(desc=self.desc, total=_length(self.batches))
                    bar.update(done)
        finally:
            if bar is not None:
                bar.close()


def _length(batches: Iterable) -> Optional[int]:
    try:
        return len(batches)  # type: ignore[arg-type]  # an Iterable may have no len(): the TypeError below
    except TypeError:
        return None


def ray_bars(delay_s: float = 0.0) -> Callable[[Iterable, str], Iterable]:
    """A ``(batches, desc) -> batches`` wrapper (``xbm.Trainer``'s ``progress`` / ``eval_progress``) whose bars a
    Ray worker hands to the driver (``ray.experimental.tqdm_ray``)."""
    from ray.experimental.tqdm_ray import tqdm

    def wrap(batches: Iterable, desc: str) -> Iterable:
        return DelayedBar(batches, desc, tqdm, delay_s)

    return wrap
