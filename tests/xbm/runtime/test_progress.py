"""xbm/runtime/progress.py: the commands' tqdm bars, drawn only when enabled, on a terminal and after their delay."""
from __future__ import annotations

import io
import sys

import pytest

from xbm.runtime import progress


class Terminal(io.StringIO):
    """A stderr that says it is a terminal (tqdm's ``disable=None`` asks ``isatty``)."""

    def isatty(self) -> bool:
        return True


def on_terminal(monkeypatch) -> Terminal:
    """sys.stderr replaced by a :class:`Terminal` (in the test's body: pytest's capture puts its own stream back
    between a fixture's set-up and the test)."""
    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


def test_a_bar_is_drawn_on_a_terminal_and_every_item_passes(monkeypatch):
    """Bug caught (the positive control of the tests below): bars that never draw, or a wrapper that drops or
    repeats an epoch's batches."""
    terminal = on_terminal(monkeypatch)
    assert list(progress.bars()(range(5), "epoch 1/2")) == [0, 1, 2, 3, 4]
    assert "epoch 1/2" in terminal.getvalue()


def test_no_bar_when_stderr_is_not_a_terminal(monkeypatch):
    """Bug caught: bars drawn into a log file, a pipe or a CI console (tqdm's carriage returns fill it with
    one line per update): the CLI's bar was built without ``disable=None``."""
    piped = io.StringIO()  # isatty() is False
    monkeypatch.setattr(sys, "stderr", piped)
    assert list(progress.bars()(range(5), "epoch 1/2")) == [0, 1, 2, 3, 4]
    with progress.bar(desc="gallery", total=3, unit="img") as bar:
        bar.update(3)
    assert piped.getvalue() == ""


def test_no_bar_under_no_progress_even_on_a_terminal(monkeypatch):
    """Bug caught: ``--no-progress`` (``enabled=False``) still drawing on a terminal."""
    terminal = on_terminal(monkeypatch)
    assert list(progress.bars(enabled=False)(range(5), "epoch 1/2")) == [0, 1, 2, 3, 4]
    with progress.bar(desc="gallery", enabled=False, total=3) as bar:
        bar.update(3)
    assert terminal.getvalue() == ""


def test_a_pass_shorter_than_its_delay_draws_nothing(monkeypatch):
    """Bug caught: an evaluation's embedding flashing a bar at every epoch of a run whose evaluation takes
    milliseconds (the delay not given to tqdm)."""
    terminal = on_terminal(monkeypatch)
    assert list(progress.bars(delay_s=60.0)(range(5), "embedding")) == [0, 1, 2, 3, 4]
    assert terminal.getvalue() == ""


def test_a_negative_delay_is_refused_with_the_rule():
    with pytest.raises(ValueError, match=r"delay_s must be >= 0 seconds, but got -1"):
        progress.bar(range(1), "x", delay_s=-1)
