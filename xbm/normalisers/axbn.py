"""Kind "axbn": XBN towards Kalman-filtered batch moments."""
from __future__ import annotations

import torch

from xbm.normalisers.base import StatefulNormaliser
from xbm.normalisers.config import NormaliserConfig
from xbm.normalisers.stats import Moments


class AXBN(StatefulNormaliser):
    """Adaptive XBN (Ajanthan et al. 2023, seed 001, §3.2.1 and Appendix E, Algorithm 1).

    One scalar Kalman filter shared by all dimensions estimates the moments of the current model's
    embeddings from the noisy batch moments. With p_0 = ``kalman_p0``, q = ``kalman_q``,
    r = ``kalman_r`` and |B| the batch size, on the first call and then every
    ``kalman_interval``-th call (0-based call c with c % interval == 0) the gain is updated:

        p_pred = p + q;   K = p_pred / (p_pred + r / |B|);   p = (1 - K) p_pred

    With ``kalman_ratio`` = rho = r / (q |B|) set, r / |B| = rho q (§3.2.1: the system depends on r / q
    alone). Divided by q the recursion reads s = p / q + 1, K = s / (s + rho), p / q = (1 - K) s: the gains
    depend on rho and p_0 / q only, and tend to K* = s* / (s* + rho) with s* = (1 + sqrt(1 + 4 rho)) / 2.

    and on every call (mu_hat, sigma_hat start as the first batch's moments):

        mu_hat    += K (E[B] - mu_hat)
        sigma_hat += K (sigma[B] - sigma_hat)
        z' = (z - E[R]) / sigma[R] * sigma_hat + mu_hat       (centre_only: z - E[R] + mu_hat)

    r = 0 gives K = 1, i.e. exactly XBN. State (in ``state_dict``): ``p``, ``gain`` (K, kept between
    gain updates), ``calls``, ``mu_hat``, ``sigma_hat``; ``p`` and ``gain`` are kept on the host
    and mirrored into the buffers. The filter does not run during the delay.
    """

    kind = "axbn"

    def __init__(self, cfg: NormaliserConfig) -> None:
        super().__init__(cfg)
        self.register_buffer("p", torch.tensor(float(cfg.kalman_p0), dtype=torch.float64))
        self.register_buffer("gain", torch.tensor(0.0, dtype=torch.float64))
        self._p, self._gain = float(cfg.kalman_p0), 0.0   # host copies (see StatefulNormaliser)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        if prefix + "p" in state_dict and prefix + "gain" in state_dict:
            self._p, self._gain = float(state_dict[prefix + "p"]), float(state_dict[prefix + "gain"])

    @property
    def current_gain(self) -> float | None:
        """The gain K the last call used (the epoch rows' ``kalman_gain``); None before the first call."""
        return self._gain if self._calls > 0 else None

    def target_moments(self, batch: Moments, batch_size: int) -> Moments:
        call = self._start(batch)
        if call % self.cfg.kalman_interval == 0:
            p_pred = self._p + self.cfg.kalman_q
            self._gain = p_pred / (p_pred + self.cfg.measurement_noise(batch_size))
            self._p = (1.0 - self._gain) * p_pred
            self.p.fill_(self._p)
            self.gain.fill_(self._gain)
        gain = self._gain
        self.mu_hat.add_(batch.mean - self.mu_hat, alpha=gain)
        self.sigma_hat.add_(batch.std - self.sigma_hat, alpha=gain)
        return Moments(self.mu_hat.clone(), self.sigma_hat.clone())
