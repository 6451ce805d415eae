"""Learning signals read from one epoch's metrics (torch-free: the sweep's driver and the CLIs use them).

- **Collapse**: ``loss_pos_pairs == 0``, no positive pair reached the loss in the whole epoch. SupCon is
  then exactly 0 (nothing to pull together) and the model learns nothing; real-image runs were found
  in this state for epochs with nothing saying so.
- **Below raw pixels**: the best Recall@1 under ``reference_raw_recall_at_1``, nearest neighbours on the
  inputs themselves: the trained model is worse than no model.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional


def collapsed(metrics: Mapping[str, Any]) -> bool:
    value = metrics.get("loss_pos_pairs")
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0


def collapse_message(metrics: Mapping[str, Any], who: str = "") -> Optional[str]:
    """What to say about a collapsed epoch (a log record's message: its level says it is a warning), else None."""
    if not collapsed(metrics):
        return None
    prefix = f"{who}: " if who else ""
    return (f"{prefix}epoch {metrics.get('epoch')} collapsed: the loss saw no positive pair "
            f"(loss {metrics.get('loss', math.nan):.4g}); check the input statistics (normalize), the augmentation "
            "(augment) and miner.pos_margin")


def collapse_warning(metrics: Mapping[str, Any], who: str = "") -> Optional[str]:
    """One warning line for a collapsed epoch (``warning: `` and :func:`collapse_message`), else None."""
    message = collapse_message(metrics, who)
    return None if message is None else f"warning: {message}"


def below_raw(best_recall_at_1: Any, raw_recall_at_1: Any) -> bool:
    """True when a finite best Recall@1 is below the raw-pixel reference."""
    try:
        best, raw = float(best_recall_at_1), float(raw_recall_at_1)
    except (TypeError, ValueError):
        return False
    return math.isfinite(best) and math.isfinite(raw) and best < raw


def trial_flags(collapsed_epochs: Any, best_recall_at_1: Any, raw_recall_at_1: Any) -> str:
    """What ``xbm-tune status`` and the report mark a trial with: "" when healthy, else e.g.
    ``collapsed 3 epochs; below raw pixels (0.412 < 0.435)``."""
    flags = []
    try:
        count = int(collapsed_epochs)
    except (TypeError, ValueError):
        count = 0
    if count > 0:
        flags.append(f"collapsed {count} epoch{'s' if count > 1 else ''}")
    if below_raw(best_recall_at_1, raw_recall_at_1):
        flags.append(f"below raw pixels ({float(best_recall_at_1):.3f} < {float(raw_recall_at_1):.3f})")
    return "; ".join(flags)
