"""Progress bars on the terminal (tqdm), for the commands: a training epoch, an evaluation's embedding, a
folder embedded by ``xbm-tune embed`` or ``retrieve``, the sections of ``xbm-tune report``.

A bar is drawn on stderr only when it is ``enabled`` (the commands' ``--no-progress`` turns it off) and stderr
is a terminal (tqdm's ``disable=None``: a log file, a pipe or a CI console gets no bar), and only once its pass
has lasted ``delay_s`` seconds (tqdm's ``delay``): a pass that ends sooner draws nothing. ``leave=False``: a
finished bar is erased, the lines printed meanwhile (``tqdm.write``) stay.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Iterable, Optional

#: a pass that is often quick (an evaluation's embedding, a report) gets a bar only once it lasts this long
DELAY_S = 3.0


def bar(iterable: Optional[Iterable] = None, desc: str = "", enabled: bool = True, delay_s: float = 0.0,
        **kwargs: Any):
    """A ``tqdm`` over ``iterable`` (or updated by hand: ``total=``) on stderr, drawn as the module docstring
    says; ``kwargs`` go to tqdm (``total``, ``unit``)."""
    from tqdm import tqdm

    if delay_s < 0:
        raise ValueError(f"delay_s must be >= 0 seconds, but got {delay_s}")
    return tqdm(iterable, desc=desc, leave=False, dynamic_ncols=True, file=sys.stderr,
                disable=None if enabled else True, delay=delay_s, **kwargs)


def bars(enabled: bool = True, delay_s: float = 0.0) -> Callable[[Iterable, str], Iterable]:
    """A ``(batches, desc) -> batches`` wrapper drawing one :func:`bar` per pass: what ``xbm.Trainer`` takes as
    ``progress`` (each training epoch) and ``eval_progress`` (each evaluation's embedding)."""
    def wrap(batches: Iterable, desc: str) -> Iterable:
        return bar(batches, desc, enabled=enabled, delay_s=delay_s)

    return wrap
