"""Fixtures for the normaliser tests: a plain float64 per-row reference of every kind (the issue's
formulas, written naively) and a small labelled memory/batch sequence hitting every group case.

Each memory row is handled on its own in a Python loop; moments are computed from explicit lists of
rows; the Kalman and EMA filters are scalar Python arithmetic.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch


def row_moments(rows: list[torch.Tensor], eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and Bessel-corrected std floored at eps of a list of float64 rows [d]."""
    n = len(rows)
    mean = sum(rows) / n
    var = sum((r - mean) ** 2 for r in rows) / (n - 1)
    return mean, torch.tensor([max(math.sqrt(float(v)), eps) for v in var], dtype=torch.float64)


class ReferenceNormaliser:
    """Stateful float64 reference: call it with the same sequence of arguments as the real one."""

    def __init__(self, cfg, superclass_of=None) -> None:
        self.cfg = cfg
        self.superclass_of = superclass_of
        self.calls = 0
        self.p = cfg.kalman_p0
        self.gain = 0.0
        self.mu_hat = self.sigma_hat = None

    def group(self, label: int) -> int:
        return int(self.superclass_of[label]) if self.cfg.kind == "scxbn" else label

    def _filtered(self, batch_mean, batch_std, batch_size):
        cfg = self.cfg
        if self.calls == 0:
            self.mu_hat, self.sigma_hat = batch_mean.clone(), batch_std.clone()
        if cfg.kind == "axbn":
            if self.calls % cfg.kalman_interval == 0:
                p_pred = self.p + cfg.kalman_q
                noise = cfg.kalman_ratio * cfg.kalman_q if cfg.kalman_ratio >= 0 else cfg.kalman_r / batch_size
                self.gain = p_pred / (p_pred + noise)
                self.p = (1 - self.gain) * p_pred
            self.mu_hat = self.mu_hat + self.gain * (batch_mean - self.mu_hat)
            self.sigma_hat = self.sigma_hat + self.gain * (batch_std - self.sigma_hat)
        elif self.calls > 0:   # ema
            m = cfg.ema_momentum
            self.mu_hat = m * self.mu_hat + (1 - m) * batch_mean
            self.sigma_hat = m * self.sigma_hat + (1 - m) * batch_std
        self.calls += 1
        return self.mu_hat, self.sigma_hat

    def __call__(self, memory, memory_labels, batch, batch_labels, epoch=0) -> torch.Tensor:
        cfg = self.cfg
        mem = [row.double() for row in memory]
        bat = [row.double() for row in batch]
        mlab = [int(x) for x in memory_labels]
        blab = [int(x) for x in batch_labels]
        if cfg.kind == "none" or epoch < cfg.delay_epochs or len(mem) < 2 or len(bat) < 2:
            return torch.stack(mem) if mem else memory.double().clone()
        mean_r, std_r = row_moments(mem, cfg.eps)
        mean_b, std_b = row_moments(bat, cfg.eps)
        tgt_mean, tgt_std = mean_b, std_b
        if cfg.kind in ("axbn", "ema"):
            tgt_mean, tgt_std = self._filtered(mean_b, std_b, len(bat))
        groups = {y: self.group(y) for y in mlab + blab}
        out = []
        for z, label in zip(mem, mlab):
            src_m, src_s, t_m, t_s = mean_r, std_r, tgt_mean, tgt_std
            if cfg.kind in ("pcxbn", "scxbn"):
                g = self.group(label)
                mem_g = [r for r, y in zip(mem, mlab) if groups[y] == g]
                bat_g = [r for r, y in zip(bat, blab) if groups[y] == g]
                if len(mem_g) >= 2 and len(bat_g) >= 2:
                    src_m, src_s = row_moments(mem_g, cfg.eps)
                    bm, bs = row_moments(bat_g, cfg.eps)
                    t_m = cfg.lambda_mu * mean_b + (1 - cfg.lambda_mu) * bm
                    t_s = cfg.lambda_sigma * std_b + (1 - cfg.lambda_sigma) * bs
                elif cfg.absent == "skip":
                    out.append(z.clone())
                    continue
            if cfg.centre_only:
                new = z - src_m + t_m
            else:
                new = (z - src_m) / src_s * t_s + t_m
            if cfg.unit_norm:
                new = new / math.sqrt(float((new * new).sum()))
            out.append(new)
        return torch.stack(out)


# Classes 0..7, super-classes superclass_of[c] = c % 3. In the memory: class 0 and 1 have many rows,
# class 2 has exactly one row, class 3 has rows but is absent from the batch, class 4 has rows but
# one batch row. In the batch: classes 0, 1, 2 have >= 2 rows, class 4 one, class 5 (not in memory) two.
MEMORY_LABELS = [0] * 9 + [1] * 8 + [2] + [3] * 7 + [4] * 6 + [6] * 3
BATCH_LABELS = [0, 0, 0, 1, 1, 2, 2, 4, 5, 5, 1, 0]
SUPERCLASS_OF = torch.arange(8) % 3


def make_memory(seed: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows with class-dependent offsets and scales, so per-class and global moments differ."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.tensor(MEMORY_LABELS)
    offsets = torch.randn(8, 5, generator=gen)
    scales = 0.5 + torch.rand(8, 5, generator=gen)
    rows = offsets[labels] + scales[labels] * torch.randn(len(labels), 5, generator=gen)
    return rows.to(dtype), labels


def make_batch(seed: int, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 + seed)
    labels = torch.tensor(BATCH_LABELS)
    rows = 0.3 + 1.7 * torch.randn(len(labels), 5, generator=gen) + 0.2 * labels.unsqueeze(1)
    return rows.to(dtype), labels


@pytest.fixture
def reference():
    return ReferenceNormaliser


@pytest.fixture
def case():
    """The data builders above, as one object (test modules cannot import conftest)."""
    return SimpleNamespace(memory=make_memory, batch=make_batch, superclass_of=SUPERCLASS_OF)
