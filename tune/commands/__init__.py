"""xbm-tune's commands: one module per command, each with ``add_arguments(parser)`` and ``run(args) -> int``;
``add_arguments`` sets the command's ``--help`` description (``tests/tune/test_cli.py`` checks every command has
one and help text for each positional argument)."""
from __future__ import annotations

import re


def plain(text: str) -> str:
    """Docstring text as plain ``--help`` text: reStructuredText's inline literals (````x````) shown as x."""
    return re.sub(r"``(.+?)``", r"\1", text)
