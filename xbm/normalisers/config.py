"""The normaliser's options: one frozen dataclass, validated on construction."""
from __future__ import annotations

from dataclasses import dataclass

from xbm.checks import checker
from xbm.registries import NORMALISERS

ABSENT_CHOICES = ("global", "skip")
#: ``kalman_r``'s default: the AXBN paper's r (§5.1, with q = 1 at |B| = 64)
KALMAN_R = 0.01
#: ``kalman_ratio``'s default: not set (r is ``kalman_r``)
RATIO_UNSET = -1.0


_check = checker("normaliser.")


@dataclass(frozen=True)
class NormaliserConfig:
    """How the memory's stored embeddings are adapted to the current batch.

    kind: none (XBM), xbn, axbn (Kalman-filtered moments), ema, pcxbn (per class), scxbn (per super-class).
    centre_only: shift means only, no scaling (thesis Eq. 4.5). unit_norm: L2-normalise adapted rows
    (thesis 4.3.5). delay_epochs: no adaptation while epoch < delay_epochs (thesis 4.3.3).
    lambda_mu, lambda_sigma: blend of whole-batch and per-group target moments (thesis Eq. 4.3).
    absent: rows whose group lacks two rows in memory or batch get the global xbn transform ("global")
    or stay untouched ("skip"). kalman_*: AXBN's scalar filter (AXBN paper Algorithm 1), whose measurement
    noise is r / |B| (§3.2.1). kalman_ratio = r / (q |B|), the one quantity the filter's steady state depends
    on (§3.2.1): when set (>= 0; -1 = not set) it wins, r = kalman_ratio * q * |B| for the batch at hand, and
    kalman_r must stay at its default 0.01 (both given: refused). The paper's r = 0.01, q = 1 at |B| = 64
    is kalman_ratio = 1.5625e-4; kalman_interval: the paper used 100 (SOP, In-Shop) and 10 (DeepFashion2).
    ema_momentum: weight of the old estimate in the EMA variant. eps: floor of the standard deviation.
    """

    kind: str = "none"
    centre_only: bool = False
    unit_norm: bool = False
    delay_epochs: int = 0
    lambda_mu: float = 0.5
    lambda_sigma: float = 1.0
    absent: str = "global"
    kalman_r: float = KALMAN_R
    kalman_ratio: float = RATIO_UNSET
    kalman_q: float = 1.0
    kalman_p0: float = 1.0
    kalman_interval: int = 1
    ema_momentum: float = 0.1
    eps: float = 1e-6

    def __post_init__(self) -> None:
        _check(self.kind in NORMALISERS, "kind", f"one of {list(NORMALISERS)}", self.kind)
        _check(self.absent in ABSENT_CHOICES, "absent", f"one of {list(ABSENT_CHOICES)}", self.absent)
        for name in ("centre_only", "unit_norm"):
            _check(isinstance(getattr(self, name), bool), name, "a boolean", getattr(self, name))
        for name in ("delay_epochs", "kalman_interval"):
            value = getattr(self, name)
            _check(isinstance(value, int) and not isinstance(value, bool), name, "an integer", value)
        _check(self.delay_epochs >= 0, "delay_epochs", ">= 0", self.delay_epochs)
        _check(self.kalman_interval >= 1, "kalman_interval", ">= 1", self.kalman_interval)
        _check(0.0 <= self.lambda_mu <= 1.0, "lambda_mu", "0 <= lambda_mu <= 1", self.lambda_mu)
        _check(0.0 <= self.lambda_sigma <= 1.0, "lambda_sigma", "0 <= lambda_sigma <= 1", self.lambda_sigma)
        _check(self.kalman_r >= 0.0, "kalman_r", ">= 0", self.kalman_r)
        _check(self.kalman_ratio >= 0.0 or self.kalman_ratio == RATIO_UNSET, "kalman_ratio",
               f"kalman_ratio >= 0, or {RATIO_UNSET} (not set: r is kalman_r)", self.kalman_ratio)
        _check(self.kalman_ratio == RATIO_UNSET or self.kalman_r == KALMAN_R, "kalman_r",
               f"its default {KALMAN_R} when kalman_ratio={self.kalman_ratio} is set (the ratio fixes "
               "r = kalman_ratio * q * |B|): give kalman_r or kalman_ratio, not both", self.kalman_r)
        _check(self.kalman_q > 0.0, "kalman_q", "> 0", self.kalman_q)
        _check(self.kalman_p0 > 0.0, "kalman_p0", "> 0", self.kalman_p0)
        _check(0.0 <= self.ema_momentum < 1.0, "ema_momentum", "0 <= ema_momentum < 1", self.ema_momentum)
        _check(self.eps > 0.0, "eps", "> 0", self.eps)

    def measurement_noise(self, batch_size: int) -> float:
        """AXBN's measurement noise r / |B| for a batch of ``batch_size`` rows (AXBN paper §3.2.1):
        ``kalman_ratio * kalman_q`` when the ratio is set (r = ratio q |B|), else ``kalman_r / batch_size``."""
        if self.kalman_ratio != RATIO_UNSET:
            return self.kalman_ratio * self.kalman_q
        return self.kalman_r / batch_size
