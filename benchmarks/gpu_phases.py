"""Where a row of benchmarks/bench_gpu.py spends its time, told as it happens.

A row's process sends each phase to the parent (``("phase", index, wall time, text)`` on the result queue);
the parent prints it at once with the row's name and the seconds since it started the row's process, so a
run cut off by a time limit still says how far each row got (a row stuck before its first batch, for one).
The wall clock (``time.time``) is used: the parent and the row's process compare their times.

:meth:`Phases.batches` wraps an epoch's batches: it reports the epoch's start, its first batch (the wait for
the loader's workers) and its end; the first batch of the first *timed* epoch is the row's ``first batch
after N s``, counted from the row's start (process start, imports, data, model, references, untimed epoch).
"""
from __future__ import annotations

import time
from typing import Iterable, Iterator, Optional


class Phases:
    """A row's phase reporter: ``phases("text")`` sends one phase; ``started`` is when the parent started
    the row's process (``time.time()``)."""

    def __init__(self, queue, index: int, started: float) -> None:
        self.queue, self.index, self.started = queue, index, started
        self.first_timed_batch: Optional[float] = None  # seconds from the row's start to its first timed batch

    def __call__(self, text: str) -> None:
        self.queue.put(("phase", self.index, time.time(), text))

    def since(self, start: float) -> str:
        """Seconds since ``start`` (a ``time.time()``), as printed."""
        return f"{time.time() - start:.1f} s"

    def batches(self, batches: Iterable, label: str, timed: bool) -> Iterator:
        """``batches`` passed through, reporting ``label``'s start, first batch and end."""
        start = time.time()
        self(f"{label}: started")
        count = 0
        for count, batch in enumerate(batches, 1):
            if count == 1:
                now = time.time()
                first = f"{label}: first batch after {now - start:.1f} s"
                if timed and self.first_timed_batch is None:
                    self.first_timed_batch = now - self.started
                    first += f" (the row's first timed batch: {self.first_timed_batch:.1f} s after its start)"
                self(first)
            yield batch
        self(f"{label}: {count} batches in {self.since(start)}")

    def progress(self, batches: Iterable, description: str) -> Iterator:
        """``Trainer(progress=...)``: the trainer's epochs (``warm-up 1/1``, ``epoch 2/3``); main epochs after
        the first are the timed ones."""
        timed = description.startswith("epoch ") and not description.startswith("epoch 1/")
        return self.batches(batches, description, timed)
