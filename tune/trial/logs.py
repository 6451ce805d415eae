"""Where the log records of ``xbm``, ``tune`` and ``analysis`` go.

Library modules log to their own logger (``logging.getLogger(__name__)``) and never add a handler: the
application decides where records go, how they look and from which level on.

* ``xbm-tune`` (``tune.cli``): :func:`cli_logging` gives the three packages' loggers one handler on stderr in a
  plain format (an INFO line as it is; ``warning: ...``, ``error: ...``, ``debug: ...`` otherwise) at INFO,
  WARNING under ``--quiet``, DEBUG under ``-v``; the command's own results stay prints on stdout. The handler
  comes off when the command returns, so calling ``tune.cli.main`` twice (a test, a notebook) prints each
  record once.
* a Ray trial's process (a trial's actor, a data-parallel trial's Train worker): :func:`trial_logging` gives
  ``tune`` and ``xbm`` a handler on stdout at INFO when nothing would otherwise print their records, so the
  trial's lines (``[xbm] trial ... starts``, one per epoch: ``tune.results.live``) reach the actor's stdout,
  which the Ray dashboard's logs and the driver's console show.
* a notebook: nothing is configured for you. ``logging.basicConfig(level=logging.INFO)`` shows every line;
  ``logging.getLogger("tune").setLevel(logging.ERROR)`` silences the sweep driver's warnings (a collapsed
  epoch, a spent budget) and ``logging.getLogger("tune.results.sink").addHandler(...)`` routes them.
"""
from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from typing import Iterator

#: the loggers whose records ``xbm-tune`` prints (each package's top logger)
PACKAGES = ("xbm", "tune", "analysis")
#: the loggers a trial's process prints (analysis runs on the driver only)
TRIAL_PACKAGES = ("tune", "xbm")
#: ``--quiet`` / default / ``-v``
QUIET, DEFAULT, VERBOSE = logging.WARNING, logging.INFO, logging.DEBUG


class CurrentStream(logging.StreamHandler):
    """A StreamHandler on ``sys.stdout`` or ``sys.stderr`` as it is when a record comes, not when the handler
    was built: a stream replaced since (pytest's capture, a notebook's redirection, Ray's worker streams) is
    the one written, and a closed earlier one is never written to. Each record is flushed at once (a driver
    whose console goes to a file or a pipe shows it now, not when a buffer fills or never if it is killed)."""

    def __init__(self, name: str = "stderr") -> None:
        if name not in ("stdout", "stderr"):
            raise ValueError(f"name must be 'stdout' or 'stderr', but got {name!r}")
        self.name_of_stream = name
        super().__init__(getattr(sys, name))

    @property
    def stream(self):
        return getattr(sys, self.name_of_stream)

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ and setStream assign it: the current one wins
        pass


class PlainFormatter(logging.Formatter):
    """The message alone at INFO; prefixed with its level in lower case otherwise (``warning: ...``), as
    ``xbm-tune`` has always written its warnings and errors."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text if record.levelno == logging.INFO else f"{record.levelname.lower()}: {text}"


@contextmanager
def cli_logging(level: int = DEFAULT) -> Iterator[logging.Handler]:
    """For the time of one ``xbm-tune`` command: the packages' records from ``level`` on, to stderr
    (:class:`CurrentStream`, :class:`PlainFormatter`); their loggers' levels and handlers as they were after."""
    handler = CurrentStream("stderr")
    handler.setFormatter(PlainFormatter())
    loggers = [logging.getLogger(name) for name in PACKAGES]
    saved = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(level)
    try:
        yield handler
    finally:
        for logger, old in zip(loggers, saved):
            logger.removeHandler(handler)
            logger.setLevel(old)


def trial_logging() -> None:
    """In a trial's process: ``tune`` and ``xbm`` records from INFO on (unless a level was set) to stdout, as
    the message alone, when no handler would otherwise receive them (a handler the user configured, e.g. on
    the root logger, is left to do it). Called at every trial's start: a reused actor keeps its one handler."""
    handler = None
    for name in TRIAL_PACKAGES:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)
        if not logger.hasHandlers():
            if handler is None:
                handler = CurrentStream("stdout")
                handler.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(handler)
