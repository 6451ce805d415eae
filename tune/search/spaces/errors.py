"""The one error a search space raises: it names the file, the key, the rule and the value."""
from __future__ import annotations


class SpaceError(ValueError):
    """A search space that cannot run. ``str(err)`` reads
    ``search space <source>, key '<key>': <rule and value>``; the CLI prints it and exits 2."""

    def __init__(self, source: str, key: str | None, message: str) -> None:
        self.source = source
        self.key = key
        self.message = message
        where = f"search space {source}" + (f", key {key!r}" if key else "")
        super().__init__(f"{where}: {message}")
