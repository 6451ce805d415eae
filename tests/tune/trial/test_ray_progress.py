"""tune/trial/ray_progress.py: rank 0's bars of ``xbm-tune train --workers N`` (drawn by the driver through Ray), on
fake bars and a fake clock (no Ray)."""
from __future__ import annotations

import io

import pytest

from tune.trial.ray_progress import DelayedBar, driver_draws_bars


class FakeBar:
    def __init__(self, desc, total):
        self.desc, self.total, self.n, self.closed = desc, total, 0, False

    def update(self, n=1):
        self.n += n

    def close(self):
        self.closed = True


def run(items, delay_s, times):
    made = []
    clock = iter(times)
    wrapped = DelayedBar(items, "epoch 1/2", lambda **kw: made.append(FakeBar(**kw)) or made[-1], delay_s,
                         clock=lambda: next(clock))
    return list(wrapped), made


def test_a_bar_appears_once_the_pass_lasts_its_delay_and_counts_every_batch():
    """Bug caught: a late bar missing the batches before it appeared, a bar per batch, or batches lost."""
    seen, made = run([10, 11, 12, 13], 5.0, [0.0, 1.0, 6.0, 7.0, 8.0])
    assert seen == [10, 11, 12, 13] and len(made) == 1
    assert (made[0].desc, made[0].total, made[0].n, made[0].closed) == ("epoch 1/2", 4, 4, True)


def test_a_pass_shorter_than_its_delay_makes_no_bar():
    """Bug caught: every evaluation of a multi-worker run sending a bar to the driver, however quick."""
    seen, made = run(iter([1, 2, 3]), 5.0, [0.0, 1.0, 2.0, 3.0])
    assert seen == [1, 2, 3] and made == []


def test_a_negative_delay_is_refused_with_the_rule():
    with pytest.raises(ValueError, match=r"delay_s must be >= 0 seconds, but got -2"):
        DelayedBar([], "x", FakeBar, -2)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("enabled, stream, draws", [(True, Terminal(), True), (False, Terminal(), False),
                                                    (True, io.StringIO(), False)])
def test_the_driver_draws_bars_only_on_a_terminal_and_without_no_progress(enabled, stream, draws):
    """Bug caught: rank 0 sending bars that the driver draws into a log file or despite ``--no-progress`` (a
    worker cannot tell: its own streams are never a terminal)."""
    assert driver_draws_bars(enabled, stream) is draws
