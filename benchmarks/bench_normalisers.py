"""Adaptation time of every normaliser kind vs one PML PairMarginMiner + SupCon step on the same memory.

A 60,000 x 512 memory (SOP scale: 11,000 classes, 12 super-classes), batch 64 (16 classes x 4):
each kind's ``norm(memory, labels, batch, batch_labels, out=buffer)`` (as XBMLoss calls it, and
without ``out``, allocating the result) and the miner + SupCon forward + backward
of the batch against the full memory, all timed in one run (median of ``--repeats`` after a warm-up)
and printed as ratios to the loss step. Uses CUDA when present. Targets: xbn <= 1.0x the loss step (aim
0.5x); pcxbn and scxbn <= 2x xbn on the CPU, <= 3x on a GPU (their group sums: index_add_ on the CPU, a
one-hot product on a GPU, ``xbm.normalisers.stats.group_sums``). On a GPU, PC-XBN and SC-XBN replay their
call as a CUDA graph (``xbm.normalisers.graphed``); their "(no CUDA graph)" rows time the eager call beside it.

    python benchmarks/bench_normalisers.py            # full size
    python benchmarks/bench_normalisers.py --quick    # 6,000-row memory, 3 repeats: a sanity run
    python benchmarks/bench_normalisers.py --profile xbn,pcxbn   # then where each kind's time goes
"""
from __future__ import annotations

import argparse
import statistics
from functools import partial
import time
from typing import Callable

import torch
from pytorch_metric_learning import losses, miners

from xbm.normalisers import NormaliserConfig, build_normaliser
from xbm.registries import NORMALISERS as KINDS


def timed(fns: dict[str, Callable[[], object]], repeats: int, device: torch.device) -> dict[str, float]:
    """Median wall time in ms of each function: three warm-up calls each (a graphed kind captures its CUDA
    graph on its third call), then ``repeats`` rounds that call every function once in turn, so that a busy
    machine slows all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        for _ in range(3):
            fn()
    for _ in range(repeats):
        for name, fn in fns.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", type=int, default=60_000, help="memory rows")
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--classes", type=int, default=11_000)
    parser.add_argument("--superclasses", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="6,000-row memory, 3 repeats")
    parser.add_argument("--profile", default="", metavar="KINDS",
                        help="comma-separated kinds whose out= call is then profiled (torch.profiler, 5 calls): "
                             "the ops and kernels that take its time")
    args = parser.parse_args(argv)
    if args.quick:
        args.memory, args.classes, args.repeats = 6_000, 1_100, 3
    device = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)

    memory = torch.nn.functional.normalize(torch.randn(args.memory, args.dim, generator=gen), dim=1).to(device)
    memory_labels = torch.randint(0, args.classes, (args.memory,), generator=gen).to(device)
    per_class = 4
    batch_classes = torch.randperm(args.classes, generator=gen)[: args.batch // per_class]
    batch_labels = batch_classes.repeat_interleave(per_class).to(device)
    batch = torch.nn.functional.normalize(torch.randn(args.batch, args.dim, generator=gen), dim=1).to(device)
    superclass_of = torch.randint(0, args.superclasses, (args.classes,), generator=gen)

    miner = miners.PairMarginMiner(pos_margin=0.2, neg_margin=0.8)
    loss_fn = losses.SupConLoss(temperature=0.1)

    def loss_step():
        queries = batch.clone().requires_grad_()
        pairs = miner(queries, batch_labels, memory, memory_labels)
        loss_fn(queries, batch_labels, pairs, memory, memory_labels).backward()

    # "out=": written into a preallocated [N, d] buffer, as XBMLoss does (in place, into its memory);
    # "new": the default call, which also allocates the [N, d] result (costly on CPU: page faults).
    buffer = torch.empty_like(memory)
    fns: dict[str, Callable[[], object]] = {"loss": loss_step}
    for kind in KINDS:
        for centre_only in (False, True):
            cfg = NormaliserConfig(kind=kind, centre_only=centre_only)
            # num_labels as the trainer passes it (scxbn checks the label range once, here)
            norm = build_normaliser(cfg, superclass_of=superclass_of, num_labels=args.classes).to(device)
            fns[(kind, centre_only, "out")] = partial(norm, memory, memory_labels, batch, batch_labels, out=buffer)
            fns[(kind, centre_only, "new")] = partial(norm, memory, memory_labels, batch, batch_labels)
            if norm.graphs is not None and norm.graphs.handles(memory):   # the same call without its graph
                eager = build_normaliser(cfg, superclass_of=superclass_of, num_labels=args.classes).to(device)
                eager.graphs = None
                fns[(kind, centre_only, "eager")] = partial(eager, memory, memory_labels, batch, batch_labels,
                                                            out=buffer)
    print(f"device={device} threads={torch.get_num_threads()} memory={args.memory}x{args.dim} "
          f"batch={args.batch} classes={args.classes} superclasses={args.superclasses} "
          f"(median ms of {args.repeats} interleaved rounds after a warm-up)")
    ms = timed(fns, args.repeats, device)
    loss_ms = ms["loss"]
    print(f"{'PairMarginMiner + SupCon fwd+bwd':26s} {loss_ms:9.2f} ms  1.00x loss step")
    print(f"{'kind':26s} {'out= (XBMLoss)':>14s} {'/loss':>6s} {'/xbn':>6s} {'new tensor':>14s} {'/loss':>6s}")
    for kind in KINDS:
        for centre_only in (False, True):
            out_ms, new_ms = ms[(kind, centre_only, "out")], ms[(kind, centre_only, "new")]
            rel = f"{out_ms / ms[('xbn', centre_only, 'out')]:5.2f}x" if kind != "none" else ""
            name = f"{kind}{' centre_only' if centre_only else ''}"
            print(f"{name:26s} {out_ms:11.2f} ms {out_ms / loss_ms:5.2f}x {rel:>6s} {new_ms:11.2f} ms "
                  f"{new_ms / loss_ms:5.2f}x")
            if (kind, centre_only, "eager") in ms:
                eager_ms = ms[(kind, centre_only, "eager")]
                print(f"{name + ' (no CUDA graph)':26s} {eager_ms:11.2f} ms {eager_ms / loss_ms:5.2f}x "
                      f"{eager_ms / ms[('xbn', centre_only, 'out')]:5.2f}x")
    xbn = ms[("xbn", False, "out")]
    worst = max(ms[("pcxbn", False, "out")], ms[("scxbn", False, "out")])
    limit = 2 if device.type == "cpu" else 3
    print(f"targets (out=): xbn <= 1.0x loss step: {xbn / loss_ms:.2f}x ({'met' if xbn <= loss_ms else 'MISSED'}); "
          f"pcxbn, scxbn <= {limit}x xbn on {device.type}: {worst / xbn:.2f}x "
          f"({'met' if worst <= limit * xbn else 'MISSED'})")
    for kind in filter(None, args.profile.split(",")):
        profile(kind, fns[(kind, False, "out")], device)
    return 0


def profile(kind: str, fn: Callable[[], object], device: torch.device, calls: int = 5) -> None:
    """Where ``kind``'s time goes: torch.profiler's table of ops (and, on CUDA, kernels) over ``calls`` calls,
    sorted by their own device time (CPU time on the CPU)."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    fn()
    with torch_profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"\nprofile of {kind} (out=), {calls} calls, by {sort}:")
    print(prof.key_averages().table(sort_by=sort, row_limit=15, max_name_column_width=60))


if __name__ == "__main__":
    raise SystemExit(main())
