"""ASHA's rung epochs (``--rungs``): geometric (Ray's, the default), placed by the schedule, or listed.

Geometric rungs ``grace_period * reduction_factor**k`` (1, 3, 9, 27) ignore the learning-rate schedule: a
rung a few epochs after a drop compares trials in the drop's transient, where the thesis shows drift, and
the variants' effects change there. ``--rungs schedule`` places them from the space's base config instead:

* **before each LR drop**: the last epoch at the old rate. Main epoch e (0-based) runs at
  ``xbm.training.optim.LrFactor(e)``; a drop at 0-based e (``factor(e) < factor(e - 1)``) makes 1-based epoch
  e the last at the old rate. ``step``: e = 15, 30, 45 with ``lr_step=15``; ``multistep``: each milestone;
  the end of a ``warmup_lr_epochs`` ramp counts when the rate falls there. ``cosine`` decays every epoch:
  no drop to place a rung before.
* **after a start**: ``normaliser.delay_epochs = tau`` adapts from 1-based epoch tau + 1 on
  (docs/ARCHITECTURE.md "Epochs"), ``memory.start_epoch = s`` uses the memory from s + 1 on. The rung is at
  ``start + SETTLE_EPOCHS`` (tau + 2): the memory holds at most one epoch of samples (``memory.ratio <= 1``),
  so epoch tau + 1 refreshes it under the new rule and epoch tau + 2 is the first trained entirely on it.
  A swept start takes its largest value (every trial's mechanism has run by then, as
  ``tune.search.spaces.fairness`` asks of the first rung).
* **nothing before a swept start's rung**: an LR-drop rung earlier than it would judge the trials with the
  later starts before their mechanism has run an epoch (thesis Table 5.6's tau in {0, ..., 30} with
  ``lr_step=15``: a rung at 15 ranks tau = 15, 20, 30 on plain XBM), which the fairness check rightly calls
  unfair (it asks for a first rung >= the largest start + 1), so ``--strict`` refused the schedule's own
  rungs. Those drop rungs are left out: the first rung is the latest swept start's rung (15 and 30 go,
  32 and 45 stay). A start that is not swept is the same in every trial, so the drops before it stay
  (every trial is judged before the mechanism alike).

Rungs at or past the last epoch are dropped (ASHA's ``max_t`` ends every trial there). Swept keys that move
the drops (``DROP_KEYS``) are checked over their values (every value of a discrete param, the extremes of a
continuous one): when the drops differ between configs, ``--rungs schedule`` is refused. A rung that is
just before a drop for one trial and mid-plateau for another is the bias the placement removes, and a
union of the drops would reintroduce it; ``--rungs E1,E2,...`` places them by hand.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from tune.errors import SweepInputError
from tune.results.trial_config import train_config
from tune.search.spaces.fairness import GEOMETRIC_RUNGS, SCHEDULE_RUNGS, STARTS
from xbm.checks import parse_milestones

#: epochs after a start (normaliser delay, memory start) before its rung: one to refill the memory, one on it
SETTLE_EPOCHS = 2
#: the config keys that decide the LR drops
DROP_KEYS = ("schedule", "lr_step", "lr_gamma", "milestones", "warmup_lr_epochs", "epochs")
#: a cap on the configs enumerated to compare drops (a product of swept values)
MAX_CONFIGS = 4096


def geometric_rungs(grace_period: int, reduction_factor: float, max_epochs: int) -> tuple[int, ...]:
    """Ray's ASHA rungs (``_Bracket``: ``grace_period * reduction_factor**k`` while <= ``max_epochs``) as the
    epochs a trial is judged at: a fractional rung (factor 1.5) is decided at the first whole epoch past it."""
    count = int(math.log(max_epochs / grace_period) / math.log(reduction_factor) + 1)
    return tuple(sorted({rung_epoch(grace_period * reduction_factor ** k) for k in range(count)}))


def rung_epoch(milestone: float) -> int:
    """The epoch ASHA decides a rung at: the first whole epoch at or past it."""
    return math.ceil(milestone - 1e-9)  # 10 * 1.1 is 11.000000000000002: still epoch 11


def lr_drops(cfg) -> tuple[int, ...]:
    """The 1-based epochs that are the last at the old rate before each LR drop of ``cfg`` (a TrainConfig);
    () for cosine, which decays every epoch."""
    if cfg.schedule == "cosine":
        return ()
    from xbm.training.optim import LrFactor  # the trainer's own formula: the rungs cannot drift from it

    factor = LrFactor(cfg.schedule, cfg.epochs, cfg.warmup_lr_epochs, cfg.lr_step, cfg.lr_gamma,
                      parse_milestones(cfg.milestones) or ())
    return tuple(e for e in range(1, cfg.epochs) if factor(e) < factor(e - 1))


def space_drops(space) -> list[tuple[int, ...]]:
    """The distinct drop sets (``lr_drops``) the space's configs can have (the base config's when none is swept)."""
    swept = [key for key in DROP_KEYS if key in space.params]
    values = [_probe_values(space, key) for key in swept]
    out: list[tuple[int, ...]] = []
    for combo in itertools.islice(itertools.product(*values), MAX_CONFIGS):
        try:
            cfg = train_config({**space.base, **dict(zip(swept, combo))})
        except ValueError:  # a combination its conditions never give (multistep without milestones)
            continue
        drops = lr_drops(cfg)
        if drops not in out:
            out.append(drops)
    return out or [lr_drops(train_config(space.base))]


def start_rungs(space, swept_only: bool = False) -> tuple[int, ...]:
    """One rung per start that is on and > 0 in some config: its largest value + ``SETTLE_EPOCHS``.
    ``swept_only``: only the starts whose key is swept (those whose value differs between trials)."""
    out = []
    for key, (_, switch, off) in STARTS.items():
        if switch not in space.params and space.fixed.get(switch, off) == off:
            continue
        if swept_only and key not in space.params:
            continue
        start = max(_probe_values(space, key)) if key in space.params else int(space.fixed.get(key) or 0)
        if start > 0:
            out.append(int(start) + SETTLE_EPOCHS)
    return tuple(out)


def schedule_rungs(space, max_epochs: int) -> tuple[int, ...]:
    """``--rungs schedule``: before each LR drop and after each start (module docstring), < ``max_epochs``."""
    drops = space_drops(space)
    if len(drops) > 1:
        raise SweepInputError(
            f"--rungs schedule needs the same LR drops in every trial, but the swept "
            f"{[k for k in DROP_KEYS if k in space.params]} give drops after epochs {[list(d) for d in drops]}: "
            f"fix them in the space, or place the rungs by hand with --rungs E1,E2,...")
    first = max(start_rungs(space, swept_only=True), default=0)  # no rung before a swept start has run
    rungs = tuple(sorted({e for e in (*drops[0], *start_rungs(space)) if first <= e < max_epochs}))
    if not rungs and first >= max_epochs:
        raise SweepInputError(
            f"--rungs schedule found no fair epoch to place a rung at before epoch {max_epochs}: the swept "
            f"{[k for k in STARTS if k in space.params]} reach {first - SETTLE_EPOCHS}, so the first rung that "
            f"judges every trial after its start has run ({first} = the largest start + {SETTLE_EPOCHS}) is at or "
            f"past the last epoch; lower the largest start, raise epochs, or use --scheduler fifo")
    if not rungs:
        base = train_config(space.base)
        raise SweepInputError(
            f"--rungs schedule found no epoch to place a rung at before epoch {max_epochs}: schedule="
            f"{base.schedule} drops no LR before it (cosine has no drop) and no normaliser delay or memory start is "
            f"set; give --rungs E1,E2,... or keep --rungs {GEOMETRIC_RUNGS}")
    return rungs


def rung_epochs(options, space, max_epochs: int) -> tuple[int, ...]:
    """The epochs ASHA judges trials at under ``options.rungs`` (``tune.driver.options.SweepOptions``)."""
    if options.rungs == GEOMETRIC_RUNGS:
        return geometric_rungs(options.grace_period, options.reduction_factor, max_epochs)
    if options.rungs == SCHEDULE_RUNGS:
        if space is None:
            raise SweepInputError("--rungs schedule needs the search space to place its rungs")
        return schedule_rungs(space, max_epochs)
    rungs = parse_milestones(options.rungs)
    if not rungs or rungs[-1] >= max_epochs:
        raise SweepInputError(f"--rungs must list increasing epochs below the epoch budget ({max_epochs}: the last "
                              f"epoch ends every trial anyway), but got {options.rungs!r}")
    return rungs


def straddle_warning(rungs: tuple[int, ...], space) -> str | None:
    """A warning when geometric rungs miss the LR drops: a rung that is not the last epoch before a drop."""
    drops = sorted({e for d in space_drops(space) for e in d})
    off = [r for r in rungs if r not in drops]
    if not drops or not off:
        return None
    return (f"ASHA's rungs {list(rungs)} straddle the LR drops (the last epochs before them: {drops}): rungs {off} "
            f"compare trials mid-plateau or in a drop's transient; --rungs schedule places them before each drop")


def _probe_values(space, key: str) -> list[Any]:
    """Every value of a discrete swept param, the extremes of a continuous one (its branches')."""
    param = space.params[key]
    return param.possible_values() or [v for b in param.branches for v in b.dist.probe_values()]


def recorded_rungs(options, rungs: tuple[int, ...] | None):
    """``options`` with ``--rungs schedule`` replaced by ``rungs``, the epochs already placed, listed: for building
    the scheduler at planning time (placed once) and at ``resume`` (from sweep.json: no space to place them
    from); other options as they are."""
    if options.rungs != SCHEDULE_RUNGS or not rungs:
        return options
    return options.replace(rungs=",".join(str(r) for r in rungs))


@dataclass(frozen=True)
class RungPlan:
    """ASHA's rungs as a sweep plans them: ``epochs`` (None for another scheduler), ``options`` with placed
    rungs listed (``recorded_rungs``: what the scheduler is built from), and the early-stopping warnings."""

    epochs: tuple[int, ...] | None
    options: Any
    warnings: list[str]


def plan_rungs(options, space, max_epochs: int) -> RungPlan:
    """The rungs of ``options`` over ``space`` and what is unfair about them: ``space.fairness_warnings`` for the
    first decision epoch (an error under ``--strict``), and, for geometric rungs, those that straddle the LR
    drops (``straddle_warning``; placed rungs are the user's or the schedule's choice)."""
    rungs = rung_epochs(options, space, max_epochs) if options.scheduler == "asha" else None
    warnings = space.fairness_warnings(rungs[0] if rungs else options.grace_period, options.scheduler)
    if warnings and options.strict:
        raise SweepInputError("unfair early stopping (--strict):\n  " + "\n  ".join(warnings))
    if rungs and options.rungs == GEOMETRIC_RUNGS:
        warnings += filter(None, [straddle_warning(tuple(r for r in rungs if r < max_epochs), space)])
    return RungPlan(rungs, recorded_rungs(options, rungs), warnings)
