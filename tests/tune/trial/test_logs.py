"""tune/trial/logs.py: the CLI's handler (stderr, plain format, levels, undone after the command) and a trial process's
(stdout, only where nothing else prints the records)."""
from __future__ import annotations

import logging
import sys
from contextlib import contextmanager

import pytest

from tune.trial.logs import PACKAGES, TRIAL_PACKAGES, CurrentStream, cli_logging, trial_logging


def test_info_lines_print_as_they_are_and_the_others_name_their_level(capsys):
    """Bug caught: the collapse warning losing its ``warning:`` (a notebook's level was moved into the text, the
    CLI's formatter must put it back), or INFO lines (where Ray runs) gaining a prefix they never had."""
    with cli_logging(logging.DEBUG):
        logging.getLogger("tune.driver.cluster").info("Ray: local Ray, 1 node(s)")
        logging.getLogger("tune.results.sink").warning("trial t1: epoch 2 collapsed")
        logging.getLogger("xbm.training.reuse").debug("reuse: %s", "hit")
        logging.getLogger("analysis.report").error("a section failed")
    out, err = capsys.readouterr()
    assert out == ""   # stdout is the commands' results
    assert err.splitlines() == ["Ray: local Ray, 1 node(s)", "warning: trial t1: epoch 2 collapsed",
                                "debug: reuse: hit", "error: a section failed"]


def test_the_handler_writes_each_record_and_flushes_it_at_once(monkeypatch):
    """Bug caught: a warning left in a stream's buffer, so a driver whose console goes to a file or a pipe
    (nohup, a cluster job's log) shows it late, or never when the driver is killed (was: the sink's print
    without flush=True)."""
    class Console:
        def __init__(self):
            self.calls = []

        def write(self, text):
            self.calls.append(("write", text))
            return len(text)

        def flush(self):
            self.calls.append(("flush", ""))

    console = Console()
    with cli_logging():
        monkeypatch.setattr(sys, "stderr", console)   # after the handler was built: the current stream is used
        logging.getLogger("tune.results.sink").warning("trial t1: epoch 1 collapsed")
    assert console.calls[0] == ("write", "warning: trial t1: epoch 1 collapsed\n")
    assert console.calls[-1] == ("flush", "")


def test_levels_and_handlers_are_as_before_once_the_command_returns(capsys):
    """Bug caught: each ``tune.cli.main`` call (tests, a notebook) adding a handler, so that the next command
    prints every line twice, or leaving ``--quiet``'s level behind for the library's next caller."""
    before = {name: (logging.getLogger(name).level, list(logging.getLogger(name).handlers)) for name in PACKAGES}
    for level in (logging.WARNING, logging.INFO):
        with cli_logging(level):
            logging.getLogger("tune.search.guards").info("budget spent")
    assert capsys.readouterr().err.splitlines() == ["budget spent"]   # once: quiet first, then one handler
    assert {name: (logging.getLogger(name).level, list(logging.getLogger(name).handlers))
            for name in PACKAGES} == before


def test_a_stream_handler_names_only_a_standard_stream():
    with pytest.raises(ValueError, match=r"name must be 'stdout' or 'stderr', but got 'stdin'"):
        CurrentStream("stdin")


@contextmanager
def logging_as_found(bare: bool):
    """The trial loggers' (and, ``bare``, the root logger's) handlers and levels restored on leaving; ``bare``: the
    logging of a fresh Ray worker meanwhile, no handler anywhere and levels unset. In the test's body: pytest puts
    its own handlers on the root logger for each phase of a test."""
    loggers = [logging.root] + [logging.getLogger(name) for name in TRIAL_PACKAGES]
    saved = [(logger, list(logger.handlers), logger.level) for logger in loggers]
    if bare:
        for logger in loggers:
            logger.handlers = []
        for name in TRIAL_PACKAGES:
            logging.getLogger(name).setLevel(logging.NOTSET)
    try:
        yield
    finally:
        for logger, handlers, level in saved:
            logger.handlers = handlers
            logger.setLevel(level)   # setLevel, not an assignment: the loggers' level caches are cleared


def test_a_trial_process_prints_its_lines_on_stdout_as_they_are(capsys, monkeypatch):
    """Bug caught: the trial's header and epoch lines, once logged instead of printed, vanishing from the Ray
    dashboard's actor logs (a worker process has no handler: Python's last resort prints WARNING and up only,
    on stderr); or a reused actor printing each line once per trial it ran (a handler per trial)."""
    from tune.results import live

    monkeypatch.setattr(live, "_trials_on_this_actor", 0)
    with logging_as_found(bare=True):
        trial_logging()
        trial_logging()   # the actor's second trial
        live.log_header("t1", "t1_kind=xbn", {"seed": 0})
        logging.getLogger("xbm.training.reuse").info("reuse: waiting")
        logging.getLogger("tune.trial.loop").debug("not shown")
    out, err = capsys.readouterr()
    assert out.splitlines() == ['[xbm] trial t1 starts (trial 1 on this actor): t1_kind=xbn '
                                'config {"seed": 0}', "reuse: waiting"]
    assert err == ""


def test_a_trial_process_with_its_own_logging_is_left_to_it():
    """Bug caught: a handler the user configured (here pytest's, on the root logger) receiving every trial line
    twice, once from it and once from a stdout handler added regardless."""
    with logging_as_found(bare=False):
        assert logging.root.handlers   # pytest's capture handlers
        for name in TRIAL_PACKAGES:
            logging.getLogger(name).handlers = []
        trial_logging()
        assert all(logging.getLogger(name).handlers == [] for name in TRIAL_PACKAGES)
