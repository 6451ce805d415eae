"""Kind "ema": XBN towards exponential moving averages of the batch moments."""
from __future__ import annotations

from xbm.normalisers.base import StatefulNormaliser
from xbm.normalisers.stats import Moments


class EMA(StatefulNormaliser):
    """EMA baseline of the AXBN paper (Ajanthan et al. 2023, seed 001, Appendix E). With momentum
    m = ``ema_momentum`` (the weight of the old estimate):

        mu_hat    = m mu_hat    + (1 - m) E[B]
        sigma_hat = m sigma_hat + (1 - m) sigma[B]
        z' = (z - E[R]) / sigma[R] * sigma_hat + mu_hat       (centre_only: z - E[R] + mu_hat)

    mu_hat and sigma_hat start as the first batch's moments; m = 0 gives exactly XBN.
    State (in ``state_dict``): ``calls``, ``mu_hat``, ``sigma_hat``.
    """

    kind = "ema"

    def target_moments(self, batch: Moments, batch_size: int) -> Moments:
        if self._start(batch) > 0:
            m = self.cfg.ema_momentum
            self.mu_hat.mul_(m).add_(batch.mean, alpha=1.0 - m)
            self.sigma_hat.mul_(m).add_(batch.std, alpha=1.0 - m)
        return Moments(self.mu_hat.clone(), self.sigma_hat.clone())
