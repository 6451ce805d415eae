"""``objective=moco``: Momentum Contrast (He et al., CVPR 2020), as the AXBN paper (seed 001, App. B, Fig. 2)
ran it from PML's MoCo example, with the configured normaliser adapting the queue.

Per step, for ``batch_size`` images drawn at random with two augmented views each:

    q = f_q(view_1)                                  query encoder = the trained model
    k = f_k(view_2)                                  key encoder, no gradient, shuffling BN (below)
    loss = NTXent(q, labels, vs. queue after enqueuing k)   PML CrossBatchMemory(NTXentLoss, enqueue_mask)
    theta_k <- m theta_k + (1 - m) theta_q           after the optimiser step (MoCo Eq. 2, m = moco.momentum)

The queue is the cross-batch memory (``memory.ratio`` of the training set) holding keys only, labelled by
instance id (the image's training index): a query's positive is its own key, and an older key of the same
image still in the queue. Before the comparison the normaliser adapts the queue towards the queries'
statistics (:class:`xbm.losses.xbm_loss.XBMLoss`); ``normaliser.kind=none`` is plain MoCo. ``memory.enabled=false``
compares the queries with the batch's own keys only.

Shuffling BN (MoCo §3.3): BatchNorm statistics shared by a query and its key let the model cheat the pretext
task. On one device the batch is split into ``moco.bn_splits`` sub-batches, each normalised on its own as on
its own GPU; queries are split in drawing order, keys after a random permutation and restored afterwards,
so no key shares its sub-batch statistics with the same sub-batch of queries. The key encoder runs in the
query encoder's train/eval modes; its BatchNorm running statistics follow its own batches, not the EMA.

With N data-parallel ranks (MoCo's own ``_batch_shuffle_ddp``): the global batch's ``bn_splits`` sub-batches
are spread over the ranks, ``bn_splits / N`` each. Queries: a rank's rows in ``bn_splits / N`` sub-batches.
Keys: the second views of every rank are gathered, permuted by one permutation (drawn from the same RNG
state on every rank), each rank embeds its ``B / N`` rows of the permuted batch, the keys are gathered back
and unshuffled, and each rank keeps its own. Every sub-batch is then the one-worker run's.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

from xbm.training.distributed import unwrap
from xbm.objectives.base import Batch, embed_views
from xbm.objectives.views import TwoViewObjective


class MoCo(TwoViewObjective):
    name = "moco"

    def __init__(self, cfg, model: nn.Module) -> None:
        super().__init__(cfg)
        self.momentum = cfg.moco.momentum
        self.bn_splits = cfg.moco.bn_splits
        self.key_encoder = copy.deepcopy(model)  # MoCo initialises f_k as a copy of f_q
        self.key_encoder.requires_grad_(False)

    @property
    def rank_splits(self) -> int:
        """BatchNorm sub-batches per rank: its share of the global batch's ``bn_splits``."""
        return self.bn_splits // self.ranks.world_size

    def forward(self, model, x, y, idx, prepare, runtime) -> Batch:
        queries = embed_views(model, x[:, 0], prepare, runtime, self.rank_splits)
        keys = self.keys(unwrap(model), x[:, 1], prepare, runtime)
        ids = torch.cat([idx, idx])
        is_key = torch.zeros(len(ids), dtype=torch.bool)   # on the host: the layout, no device read to split by it
        is_key[len(idx):] = True
        return Batch(torch.cat([queries, keys.to(queries.dtype)]), ids, ids, is_key)

    @torch.no_grad()
    def keys(self, model, views, prepare, runtime) -> torch.Tensor:
        self._follow_modes(model)
        ranks, own = self.ranks, len(views)
        views = ranks.gather(views)   # every rank's views, rank order (one rank: its own)
        # the CPU generator: the same on every device; non_blocking: a pageable copy is staged at once, no wait
        order = torch.randperm(len(views)).to(views.device, non_blocking=True)
        share = views[order][ranks.rank * own:(ranks.rank + 1) * own]
        shuffled = ranks.gather(embed_views(self.key_encoder, share, prepare, runtime, self.rank_splits))
        keys = torch.empty_like(shuffled)
        keys[order] = shuffled
        return keys[ranks.rank * own:(ranks.rank + 1) * own].detach()

    def _follow_modes(self, model: nn.Module) -> None:
        for mine, theirs in zip(self.key_encoder.modules(), model.modules()):
            mine.training = theirs.training

    @torch.no_grad()
    def after_step(self, model: nn.Module) -> None:
        """theta_k <- m theta_k + (1 - m) theta_q (MoCo Eq. 2), parameters only."""
        model = unwrap(model)
        mine: list[torch.Tensor] = list(self.key_encoder.parameters())
        theirs = [p.detach() for p in model.parameters()]
        torch._foreach_mul_(mine, self.momentum)
        torch._foreach_add_(mine, theirs, alpha=1.0 - self.momentum)
