"""Input checks shared by every layer: one rule, one message ("<field> must satisfy <rule>, but got <value>"),
the rules that turn a key's text (``--set``, YAML) into its value (``coerce``, ``parse_milestones``, ``parse_ks``),
and the one rule of a global batch's split over data-parallel workers (``batch_split_problem``).

``xbm`` owns them because every layer may import ``xbm`` and ``xbm`` imports no other layer; ``tune``
passes its own exception class (``SweepInputError``: the CLI's exit 2).
"""
from __future__ import annotations

from dataclasses import dataclass
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


def _positive_ints(text: str) -> tuple[int, ...] | None:
    """``"1, 10,100"`` -> (1, 10, 100); None unless every comma-separated part is an integer >= 1."""
    parts = [part.strip() for part in str(text).split(",")]
    if not all(part.isdigit() and int(part) >= 1 for part in parts):
        return None
    return tuple(int(part) for part in parts)


def parse_milestones(text: str) -> tuple[int, ...] | None:
    """``"30, 60"`` -> (30, 60); ``""`` -> (); None unless every part is an integer >= 1, strictly increasing."""
    if not str(text).strip():
        return ()
    values = _positive_ints(text)
    return values if values is not None and all(a < b for a, b in zip(values, values[1:])) else None


def parse_ks(text: str) -> tuple[int, ...] | None:
    """``"1, 10,100"`` -> (1, 10, 100); None unless every part is an integer >= 1, distinct, and there is one."""
    ks = _positive_ints(text)
    return ks if ks is not None and len(set(ks)) == len(ks) else None


#: keys holding a list as comma-separated text; ``coerce`` also takes a list or ``[1, 3]`` for them
LIST_KEYS = ("eval_ks", "milestones")


def _list_text(value: Any) -> Any:
    """A list-valued key's value as its text: ``[1, 3]`` (YAML), ``"[1, 3]"`` (``--set``) -> ``"1,3"``; other
    values unchanged (``"1,3"`` stays, anything else is judged by the key's own rule)."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(item).strip() for item in value)
    if isinstance(value, str) and value.strip().startswith("[") and value.strip().endswith("]"):
        return ",".join(part.strip() for part in value.strip()[1:-1].split(","))
    return value


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def coerce(key: str, value: Any, kind: type) -> Any:
    """Convert ``value`` (often a string from ``--set``) to the field's type, or say why not."""
    if key in LIST_KEYS:
        value = _list_text(value)
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
                return value.lower() in _TRUE
            if isinstance(value, (int, float)) and value in (0, 1):
                return bool(value)
            raise ValueError
        if kind is int:
            if isinstance(value, bool):
                raise ValueError
            as_float = float(value)
            if not as_float.is_integer():
                raise ValueError
            return int(as_float)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind is str:
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise ValueError
            return str(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key} must be of type {kind.__name__}, but got {value!r}") from None
    return value


@dataclass(frozen=True)
class SplitProblem:
    """How a global batch fails to split over data-parallel workers: the ``field`` to change, its ``value``, the
    ``rule`` it breaks (worded for the config), and for ``batch_size`` what each rank must draw whole: ``unit``
    rows of ``what`` (``unit`` 1: equal shares), so that a flag's message can say it its own way."""

    field: str
    value: int
    rule: str
    unit: int = 1
    unit_name: str = ""
    what: str = ""


def batch_split_problem(batch_size: int, workers: int, objective: str, samples_per_class: int,
                        neighbours_k: int, bn_splits: int, sampler: str = "m_per_class") -> SplitProblem | None:
    """The first rule of xbm.training.sharding that ``batch_size`` rows over ``workers`` ranks break, else None:
    equal shares; whole classes for ``supervised`` (``samples_per_class`` rows each; equal shares with
    ``sampler=random``, whose batches hold no whole classes); whole tuples for
    ``neighbours`` (an anchor and its k neighbours); for ``moco``, its shuffled BatchNorm sub-batches shared out
    (``bn_splits`` a multiple of ``workers``). The one rule behind the config's check and the CLI flags'."""
    if workers <= 1:
        return None
    share = batch_size // workers
    # the unit a rank draws whole: a key of the table below (sampler=random: shuffled images, equal shares)
    drawn = "classes" if objective == "supervised" and sampler == "m_per_class" else objective
    unit, unit_name, what = {"classes": (samples_per_class, f"samples_per_class={samples_per_class}", "classes"),
                             "neighbours": (neighbours_k + 1, f"neighbours.k + 1 = {neighbours_k + 1}", "tuples"),
                             }.get(drawn, (1, "", ""))
    if batch_size % workers:
        return SplitProblem("batch_size", batch_size, f"a multiple of workers={workers} (batch_size is the global "
                            "batch, split evenly over the workers)", unit, unit_name, what)
    if drawn == "classes" and share % unit:
        return SplitProblem("batch_size", batch_size, f"batch_size / workers a whole multiple of {unit_name} (each "
                            f"worker takes whole classes of the global batch; batch_size / workers = {batch_size} / "
                            f"{workers} = {share}): change batch_size, workers or samples_per_class",
                            unit, unit_name, what)
    if objective == "neighbours" and share % unit:
        return SplitProblem("batch_size", batch_size, f"batch_size / workers = {share} a multiple of {unit_name} "
                            "(each worker takes whole tuples)", unit, unit_name, what)
    if objective == "moco" and bn_splits % workers:
        return SplitProblem("moco.bn_splits", bn_splits, f"a multiple of workers={workers} (the global batch's "
                            "shuffled BatchNorm sub-batches, bn_splits / workers per worker)")
    return None
