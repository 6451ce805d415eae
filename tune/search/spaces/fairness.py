"""Fairness of early stopping for swept start times.

ASHA (and HyperBand) compare trials at rung epochs; the first rung is ``grace_period`` (epochs are
1-based, ``docs/ARCHITECTURE.md``). A normaliser with ``delay_epochs = tau`` first adapts in 0-based
epoch ``tau``, i.e. 1-based epoch ``tau + 1``; the memory with ``start_epoch = s`` first acts in epoch
``s + 1``. A trial whose ``tau >= grace_period`` is judged at the first rung before the mechanism under
test has run once, so ASHA culls it on the merits of plain SupCon. Fair: ``grace_period >= max + 1``
(at least one epoch with the mechanism on; more is fairer). FIFO stops nothing and is always fair.
A start time that reaches ``epochs`` means the mechanism never runs at all: also reported.
"""
from __future__ import annotations

from typing import Any, Mapping, Protocol

from tune.search.spaces.param import Param


class _Space(Protocol):
    """What this module reads of ``tune.search.spaces.space.SearchSpace`` (which imports it: no import back)."""

    @property
    def params(self) -> Mapping[str, Param]: ...

    @property
    def fixed(self) -> dict[str, Any]: ...

#: ``--rungs``: Ray's geometric ASHA rungs, or rungs placed by the LR schedule (``tune.search.rungs``), the
#: values besides listed epochs (torch-free here: the sweep's options check them)
GEOMETRIC_RUNGS, SCHEDULE_RUNGS = "geometric", "schedule"
#: the swept start times: key -> (what starts, the key that switches it, the value that switches it off)
STARTS = {
    "normaliser.delay_epochs": ("the normaliser's adaptation (thesis 4.3.3)", "normaliser.kind", "none"),
    "memory.start_epoch": ("the cross-batch memory", "memory.enabled", False),
}
EARLY_STOPPING = ("asha", "hyperband")


def fairness_warnings(space: _Space, grace_period: int, scheduler: str) -> list[str]:
    """One message per swept start-time key that can reach the first rung (or the last epoch).
    ``grace_period`` is the scheduler's first rung: ASHA's grace period, HyperBand's smallest r."""
    out: list[str] = []
    epochs = _max_of(space, "epochs")
    for key, (what, _, _) in STARTS.items():
        if key not in space.params:
            continue
        reach = _max_of(space, key)
        if scheduler in EARLY_STOPPING and reach >= grace_period:
            fair = (f"--grace-period {reach + 1} or more" if scheduler == "asha" else
                    f"--scheduler asha --grace-period {reach + 1} or more (HyperBand's brackets start lower)")
            out.append(
                f"{key} is swept up to {reach}: trials with {key} >= {grace_period} meet {scheduler}'s first "
                f"rung (epoch {grace_period}) before {what} has run an epoch, so they are culled on the "
                f"baseline's merits. Fair: {fair}, or --scheduler fifo"
            )
        if reach >= epochs:
            out.append(f"{key} is swept up to {reach} but trials run {epochs} epochs: with {key} >= {epochs} "
                       f"{what} never runs. Lower its upper bound below {epochs} or raise epochs")
    return out


def _max_of(space: _Space, key: str) -> int:
    if key in space.params:
        return int(max(branch.dist.max_value() for branch in space.params[key].branches))
    return int(space.fixed[key])
