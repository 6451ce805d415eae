"""PC-XBN's and SC-XBN's calls replayed as CUDA graphs (xbm/normalisers/graphed.py) against the eager path.

Each test runs twice: on the GPU with real graphs, and on the CPU with a stand-in whose "graph" is the call it
recorded, run again at each replay on the buffers it was recorded with, so that CI checks the bookkeeping
(which graph, which inputs copied where, when to capture) without a GPU."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from xbm.normalisers import NormaliserConfig, build_normaliser
from xbm.normalisers.graphed import GraphedCall

from ..conftest import needs_cuda

SUPER = torch.arange(40) % 6
DEVICES = [pytest.param("cpu", id="cpu stand-in"), pytest.param("cuda", marks=needs_cuda)]


class StandIn(GraphedCall):
    """GraphedCall on the CPU: a "graph" is its recorded call, run again (on the buffers it was recorded with)."""

    def handles(self, memory):
        return True

    def _on_side_stream(self, work, device):
        work()

    def _record(self, work, device):
        return type("Recorded", (), {"replay": staticmethod(work)})()


def _pair(kind: str, device: str, **options):
    """The same normaliser twice: graphed (the default on a GPU; the stand-in on the CPU) and always eager."""
    cfg = NormaliserConfig(kind=kind, **options)
    graphed = build_normaliser(cfg, superclass_of=SUPER, num_labels=40).to(device)
    eager = build_normaliser(cfg, superclass_of=SUPER, num_labels=40).to(device)
    if device == "cpu":
        graphed.graphs = StandIn()
    eager.graphs = None
    return graphed, eager


def _batch(step: int, device: str, size: int = 32):
    gen = torch.Generator().manual_seed(100 + step)
    labels = torch.randint(0, 40, (size // 4,), generator=gen).repeat_interleave(4)
    return torch.randn(size, 16, generator=gen).to(device), labels.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["pcxbn", "scxbn"])
@pytest.mark.parametrize("options", [{}, {"centre_only": True}, {"unit_norm": True, "absent": "skip"}],
                         ids=["full", "centre_only", "unit_norm_skip"])
def test_a_graphed_group_kind_gives_the_eager_values_step_after_step(kind, options, device):
    """Bugs caught: a replay that reads the batch it was captured with (the new batch not copied into the
    captured buffers), that misses the rows enqueued since the capture, or that keeps the options it was
    captured with after they change (population-based training explores lambda_mu); and a graph never taken
    (nothing replayed). As XBMLoss calls it: in place, into a memory whose rows are replaced between calls."""
    graphed, eager = _pair(kind, device, **options)
    gen = torch.Generator().manual_seed(0)
    memory = torch.randn(600, 16, generator=gen).to(device)
    labels = torch.randint(0, 40, (600,), generator=gen).to(device)
    mine, theirs = memory.clone(), memory.clone()
    for step in range(12):
        if step == 8:
            graphed.cfg = eager.cfg = dataclasses.replace(graphed.cfg, lambda_mu=0.25, lambda_sigma=0.75)
        batch, batch_labels = _batch(step, device)
        rows = slice(32 * step % 600, 32 * step % 600 + 32)   # the ring buffer's enqueue of this batch
        mine[rows], theirs[rows] = batch, batch
        labels[rows] = batch_labels
        graphed(mine, labels, batch, batch_labels, out=mine)
        eager(theirs, labels, batch, batch_labels, out=theirs)
        assert torch.equal(mine, theirs), f"step {step}"
    # eager at steps 0 and 1, captured at 2 and replayed to 7; the new options: eager at 8 and 9, captured at 10
    assert graphed.graphs.captures == 2
    assert graphed.graphs.replays == 6 + 2
    assert copy.deepcopy(graphed).graphs.captures == 0   # a copy starts eager


@pytest.mark.parametrize("device", DEVICES)
def test_a_graph_waits_for_the_memory_to_stop_growing_and_a_short_last_batch_keeps_the_full_ones_graph(device):
    """Bugs caught: a graph replayed on a view of another length (the memory's ``valid()`` grows while it
    fills, and a graph holds the length it was captured with), and each epoch's shorter last batch costing
    the full batches their graph (a capture every epoch, until the capture limit turns graphs off)."""
    graphed, eager = _pair("pcxbn", device)
    buffer, labels = torch.zeros(400, 16, device=device), torch.zeros(400, dtype=torch.long, device=device)
    mine, theirs = buffer.clone(), buffer.clone()
    sizes = [32] * 16 + [16] * 3 + [32] * 3 + [16] * 2   # filling (12.5 batches), full, last batches, full again
    pointer = filled = 0
    for step, size in enumerate(sizes):
        batch, batch_labels = _batch(step, device, size)
        rows = (pointer + torch.arange(size, device=device)) % 400   # the ring buffer's enqueue
        mine[rows], theirs[rows], labels[rows] = batch, batch, batch_labels
        pointer, filled = pointer + size, min(filled + size, 400)
        graphed(mine[:filled], labels[:filled], batch, batch_labels, out=mine[:filled])
        eager(theirs[:filled], labels[:filled], batch, batch_labels, out=theirs[:filled])
        assert torch.equal(mine, theirs), f"step {step}"
        if filled < 400:
            assert graphed.graphs.captures == 0, "captured while the memory was still filling"
    # full from step 12: eager at 12 and 13, captured at 14, replayed at 15; batches of 16: eager at 16 and 17,
    # captured at 18; both graphs kept, so the 5 calls after them replay
    assert graphed.graphs.captures == 2
    assert graphed.graphs.replays == 2 + 1 + 5
