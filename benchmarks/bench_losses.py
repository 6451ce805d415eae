"""One XBMLoss step (forward + backward of a batch against a full memory) per ``loss.kind``, and for the
losses that run on pair masks (SupCon, contrastive, NT-Xent) the same step on PML's index tuples, side by side in
one run.

Batch 64 (16 classes x 4) of 128-d embeddings against a memory of ``--memory`` rows (default 2,048) from
``--classes`` classes; all pairs (no miner, MS without its own mining), as the XBM code runs a loss that
weighs its own pairs.
Prints the median ms per step (``timed`` from bench_normalisers: one warm-up, then rounds in turn) and, for
the masked losses, the speed-up over the index path. Uses CUDA when present.

``--mined``: SupCon with the Omniglot study's PairMarginMiner (L2 margins 0.09 / 0.93) against a 17,800-row
256-d memory, where the miner leaves most entries out: ``masked_logsumexp`` (left-out entries at -inf) beside
PML's ``logsumexp`` (at ``finfo.min``, where torch's CPU exp leaves its vectorised path), side by side.

    python benchmarks/bench_losses.py            # 2,048-row memory
    python benchmarks/bench_losses.py --quick    # 1,024 rows, 3 repeats
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_normalisers import timed  # noqa: E402

from xbm.losses.config import LossConfig  # noqa: E402
from xbm.losses.kinds import LOSSES  # noqa: E402
from xbm.losses.xbm_loss import XBMLoss  # noqa: E402

MASKED = ("supcon", "contrastive", "ntxent")   # xbm.losses.pair_masks.supports_masks with their default options


def step(kind: str, memory: int, classes: int, masks: bool, device: torch.device):
    """A closure running one step of ``kind`` against a memory filled with ``memory`` rows."""
    gen = torch.Generator().manual_seed(0)
    crit = XBMLoss(LOSSES[kind](LossConfig(kind=kind)), embedding_size=128, memory_size=memory).to(device)
    crit.masks = crit.masks and masks
    for start in range(0, memory, 256):   # fill the memory
        rows = torch.nn.functional.normalize(torch.randn(256, 128, generator=gen), dim=1).to(device)
        crit(rows, torch.randint(0, classes, (256,), generator=gen).to(device))
    batch = torch.randn(64, 128, generator=gen).to(device)
    labels = torch.arange(16).repeat_interleave(4).to(device)

    def run():
        z = torch.nn.functional.normalize(batch.clone().requires_grad_(), dim=1)
        crit(z, labels).backward()
    return run


def mined_step(memory: int, device: torch.device):
    """A closure running one SupCon step with the study's miner against a filled ``memory``-row 256-d memory."""
    from xbm.losses.config import MinerConfig
    from xbm.losses.criteria import build_pair_miner

    gen = torch.Generator().manual_seed(0)
    loss = LossConfig(kind="supcon")
    miner = build_pair_miner(loss, MinerConfig(kind="pair_margin", distance="lp", pos_margin=0.09, neg_margin=0.93))
    crit = XBMLoss(LOSSES["supcon"](loss), embedding_size=256, memory_size=memory, miner=miner).to(device)
    centres = torch.nn.functional.normalize(torch.randn(968, 256, generator=gen), dim=1)
    for start in range(0, memory, 256):   # rows near their class's centre, so that some negatives are mined
        labels = torch.randint(0, 968, (256,), generator=gen)
        rows = torch.nn.functional.normalize(centres[labels] + 0.6 * torch.randn(256, 256, generator=gen) / 16, dim=1)
        crit(rows.to(device), labels.to(device))
    labels = torch.arange(16).repeat_interleave(4)
    batch = centres[labels] + 0.6 * torch.randn(64, 256, generator=gen) / 16

    def run():
        z = torch.nn.functional.normalize(batch.to(device).clone().requires_grad_(), dim=1)
        crit(z, labels.to(device)).backward()
    return run


def mined(repeats: int, device: torch.device) -> None:
    """``--mined``: the SupCon step with ``masked_logsumexp`` and with PML's ``logsumexp`` in its place, in turn
    on the same loss and memory (rounds alternate, so that a busy machine slows both alike)."""
    from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

    import xbm.losses.pair_masks as pair_masks

    ours, step_fn = pair_masks.masked_logsumexp, mined_step(17800, device)

    def with_pml():
        pair_masks.masked_logsumexp = lambda x, keep: lmu.logsumexp(x, keep_mask=keep, add_one=False, dim=1)
        try:
            step_fn()
        finally:
            pair_masks.masked_logsumexp = ours

    ms = timed({"masked_logsumexp (-inf)": step_fn, "PML logsumexp (finfo.min)": with_pml}, repeats, device)
    print(f"device {device}, threads {torch.get_num_threads()}, memory 17,800 rows, batch 64, 256-d, SupCon with "
          "the study's PairMarginMiner; median ms per step")
    for name, value in ms.items():
        print(f"  {name:28s} {value:9.2f}")
    print(f"  PML's / ours: {ms['PML logsumexp (finfo.min)'] / ms['masked_logsumexp (-inf)']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,024-row memory, 3 repeats")
    parser.add_argument("--memory", type=int, default=2048)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mined", action="store_true", help="SupCon with a miner at the study's memory size")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.mined:
        return mined(args.repeats, device)
    memory, repeats = (1024, 3) if args.quick else (args.memory, args.repeats)
    fns = {kind: step(kind, memory, args.classes, True, device) for kind in LOSSES}
    fns.update({f"{kind} (index path)": step(kind, memory, args.classes, False, device)
                for kind in MASKED})
    ms = timed(fns, repeats, device)
    print(f"device {device}, memory {memory} rows, batch 64, 128-d, all pairs; median ms per step")
    for name, value in ms.items():
        print(f"  {name:28s} {value:9.2f}")
    for kind in MASKED:
        print(f"  {kind}: masks {ms[f'{kind} (index path)'] / ms[kind]:.1f}x faster than the index path")


if __name__ == "__main__":
    main()
