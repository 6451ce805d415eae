"""``toy``: a synthetic metric-learning set, instant on CPU, no files.

Many classes of a few samples each (like Stanford Online Products), with super-classes, seen through a
fixed random nonlinear map so that a small MLP embedding has something to learn:

.. math::
    s_k \\sim \\mathcal N(0, I_m),\\quad c_y = s_{k(y)} + \\sigma_c\\,\\epsilon_y,\\quad
    z_i = c_{y_i} + \\sigma_n\\,\\epsilon_i,\\quad
    x_i = \\mathrm{std}\\big(W_3 \\tanh(W_2 \\tanh(g W_1 z_i + b_1) + b_2)\\big)

with latent dimension ``m``, super-class ``k(y) = y mod K``, Gaussian weights scaled by ``1/sqrt(fan_in)``
and ``std`` a per-feature standardisation. The generator's seed is fixed (:data:`TOY_SEED`), independent
of ``cfg.seed``: every trial sees the same data. The first half of the classes trains, the second half is
the test split (leave-one-out retrieval); super-classes span both halves.
"""
from __future__ import annotations

import numpy as np
import torch

from xbm.data.base import RawData
from xbm.data.sources import VectorSource

# Recall@K reported here (a test set); ``eval_ks`` overrides it.
RECALL_KS = (1, 10)

TOY_SEED = 1234


def make_toy(num_classes: int = 400, samples_per_class: int = 8, dim: int = 40, latent_dim: int = 16,
             num_superclasses: int = 20, class_spread: float = 0.6, noise: float = 0.35,
             nuisance_dim: int = 8, nuisance: float = 1.5,
             hidden: int = 64, gain: float = 1.0, seed: int = TOY_SEED) -> RawData:
    """Build the toy set (float32 [num_classes * samples_per_class, dim]); deterministic given ``seed``."""
    if num_classes < 2 or samples_per_class < 2:
        raise ValueError(f"toy needs num_classes >= 2 and samples_per_class >= 2 (leave-one-out retrieval), "
                         f"but got num_classes={num_classes}, samples_per_class={samples_per_class}")
    if not 1 <= num_superclasses <= num_classes:
        raise ValueError(f"toy needs 1 <= num_superclasses <= num_classes={num_classes}, "
                         f"but got {num_superclasses}")
    rng = np.random.default_rng(seed)
    supers = rng.standard_normal((num_superclasses, latent_dim))
    super_of_class = np.arange(num_classes) % num_superclasses
    centres = supers[super_of_class] + class_spread * rng.standard_normal((num_classes, latent_dim))
    labels = np.repeat(np.arange(num_classes), samples_per_class)
    z = centres[labels] + noise * rng.standard_normal((len(labels), latent_dim))
    z = np.concatenate([z, nuisance * rng.standard_normal((len(labels), nuisance_dim))], axis=1)
    w1 = rng.standard_normal((latent_dim + nuisance_dim, hidden)) / np.sqrt(latent_dim + nuisance_dim)
    w2 = rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)
    w3 = rng.standard_normal((hidden, dim)) / np.sqrt(hidden)
    b1, b2 = 0.5 * rng.standard_normal(hidden), 0.5 * rng.standard_normal(hidden)
    x = np.tanh(np.tanh(gain * z @ w1 + b1) @ w2 + b2) @ w3
    x = (x - x.mean(0)) / (x.std(0) + 1e-8)
    n_train = num_classes // 2
    train = np.flatnonzero(labels < n_train)
    test = np.flatnonzero(labels >= n_train)
    return RawData(name="toy", source=VectorSource(torch.from_numpy(x.astype(np.float32))),
                   labels=labels, train=train, query=test, superlabels=super_of_class[labels])


def build_toy(cfg) -> RawData:
    """Registry entry: the default toy set (ignores data_root; same data for every seed)."""
    return make_toy()
