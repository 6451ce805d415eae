"""Feature drift at a gap of Δt training iterations (XBM paper, seed 002 Eq. 2 and Fig. 3):

    D(x, t; Δt) = ||f(x; θ_t) - f(x; θ_{t-Δt})||_2

for the samples x of a fixed probe of training samples, reported as its mean and max over the probe
(``drift_<Δt>_mean``, ``drift_<Δt>_max``; the paper plots the mean of the squared norm). Measured at the end of each
main epoch, over the Δt iterations that end there: the latest complete measurement; None while fewer than Δt main
iterations have run. ``drift_mean`` / ``drift_max`` (:func:`xbm.evaluate.diagnostics.feature_drift`) stay the
between-epoch measure.

Cost: the probe is embedded only where a measurement needs it, at an epoch's end E and at E - Δt for each Δt:
at most ``len(deltas) + 1`` probe passes per epoch (eval mode, the evaluation's ``Embedder``), between steps, never
inside one; the other steps do nothing but count, and the measurements are read from the device once, by
``metrics()`` after the epoch. The probe passes count in the epoch's ``train_s``. Snapshots for a Δt longer than an epoch are planned from the
current epoch's length; an epoch of another length finds no snapshot at E - Δt and reports None, never a drift
over another gap.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor

DRIFT_STEPS = (10, 100, 1000)   # Δt in iterations, XBM Fig. 3's gaps


class StepDrift:
    """``after_step()`` after every main-phase optimiser step, ``begin_epoch(length)`` before each main epoch,
    ``metrics()`` after it. ``embed()`` gives the probe's current embeddings [P, d] (the same samples, in the
    same order, every call)."""

    def __init__(self, embed: Callable[[], Tensor], deltas: tuple[int, ...] = DRIFT_STEPS) -> None:
        if not deltas or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in deltas):
            raise ValueError(f"deltas must be positive integers (iterations), but got {deltas!r}")
        self.embed, self.deltas = embed, tuple(sorted(set(deltas)))
        self.iteration = 0                               # main-phase steps so far
        self.snapshots: dict[int, Tensor] = {}           # iteration -> the probe's embeddings then
        self.latest: dict[int, Tensor] = {}              # Δt -> [mean, max] of the latest measurement
        self._due: set[int] = set()
        self._end = 0

    def begin_epoch(self, length: int) -> None:
        """Plan the snapshots of an epoch of ``length`` steps: its end, and for each Δt the one iteration of
        this epoch that lies Δt before an epoch end (this one's or a later one's, as long as this one)."""
        start, self._end = self.iteration, self.iteration + length
        self._due = {self._end} if length > 0 else set()
        for delta in self.deltas if length > 0 else ():
            t = self._end - delta
            if t < start:   # Δt spans epochs: the same phase, whole epochs later
                t += -(-(start - t) // length) * length
            self._due.add(t)
        if start in self._due and start not in self.snapshots:
            self.snapshots[start] = self.embed().detach()

    def after_step(self) -> None:
        self.iteration += 1
        if self.iteration not in self._due:
            return
        current = self.embed().detach()
        self.snapshots[self.iteration] = current
        if self.iteration != self._end:
            return
        for delta in self.deltas:
            before = self.snapshots.get(self.iteration - delta)
            if before is not None:
                distances = (current.float() - before.to(current.device).float()).norm(dim=1)
                self.latest[delta] = torch.stack([distances.mean(), distances.max()])
        oldest = self.iteration - self.deltas[-1]   # no later measurement reaches further back
        self.snapshots = {t: z for t, z in self.snapshots.items() if t >= oldest}

    def metrics(self) -> dict[str, Optional[float]]:
        """``drift_<Δt>_mean`` and ``drift_<Δt>_max`` for each Δt (None before the first measurement); one read
        of the device."""
        measured = [d for d in self.deltas if d in self.latest]
        values = torch.stack([self.latest[d] for d in measured]).tolist() if measured else []
        out: dict[str, Optional[float]] = {}
        for delta in self.deltas:
            mean, top = values[measured.index(delta)] if delta in measured else (None, None)
            out[f"drift_{delta}_mean"], out[f"drift_{delta}_max"] = mean, top
        return out

    def state_dict(self) -> dict:
        return {"iteration": self.iteration, "snapshots": {t: z.cpu() for t, z in self.snapshots.items()},
                "latest": {d: v.cpu() for d, v in self.latest.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.iteration = int(state["iteration"])
        self.snapshots = dict(state["snapshots"])
        self.latest = dict(state["latest"])


def drift_names(deltas: tuple[int, ...] = DRIFT_STEPS) -> tuple[str, ...]:
    """The metric names of :class:`StepDrift` (``drift_10_mean``, ``drift_10_max``, ...)."""
    return tuple(f"drift_{d}_{s}" for d in sorted(deltas) for s in ("mean", "max"))


__all__ = ["DRIFT_STEPS", "StepDrift", "drift_names"]
