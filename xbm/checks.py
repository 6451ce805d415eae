"""Input checks shared by every layer: one rule, one message ("<field> must satisfy <rule>, but got <value>").

``xbm`` owns them because every layer may import ``xbm`` and ``xbm`` imports no other layer; ``tune``
passes its own exception class (``SweepInputError``: the CLI's exit 2).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable


def checker(prefix: str = "", error: type[Exception] = ValueError) -> Callable[[bool, str, str, Any], None]:
    """``check(ok, name, rule, value)``: raise ``error`` naming ``prefix + name``, the rule and the value
    unless ``ok``."""

    def check(ok: bool, name: str, rule: str, value: Any) -> None:
        if not ok:
            raise error(f"{prefix}{name} must satisfy {rule}, but got {value!r}")

    return check


def parse_overrides(pairs: Iterable[str] | None, error: type[Exception] = ValueError) -> dict[str, str]:
    """``--set key=value`` pairs -> dict, key and value stripped of surrounding blanks (values stay strings;
    ``TrainConfig.from_dict`` coerces them). A pair without ``=`` or with an empty key raises ``error``."""
    check = checker(error=error)
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        check(bool(sep) and bool(key.strip()), "--set", "the form key=value (e.g. --set lr=3e-4)", pair)
        out[key.strip()] = value.strip()
    return out
