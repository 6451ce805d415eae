"""What an epoch of ``xbm-tune train`` waits for its checkpoint: a ``torch.save`` of the whole state, against
``CheckpointWriter.save`` (the state's tensors copied into the run's reused host buffers, the file written by a
background thread), side by side in one run. The writer's first save, which allocates those buffers (pinned
on a GPU), is printed apart. Then the copy alone (``HostBuffers.snapshot``), two ways side by side: a copy per
tensor (the writer before 2026-11-28) and the state packed per dtype (the writer's way for a GPU state; on the
CPU the writer copies per tensor, and the packed row runs the tests' stand-in, one extra copy).

The state is a ResNet50 trainer's at the benchmark's size: timm ``resnet50`` with a 512-d head, AdamW's two
moments after one step, and a memory of ``--memory`` x 512 rows (about 300 MB with the default 1,000 rows,
as bench_gpu's XBN rows; the H100 took 0.37-0.50 s for a ``torch.save`` of it after every epoch). Rounds
alternate the two ways, each to its own file on ``--folder``'s disk (default: a temporary folder), and
print medians: the caller's wait (what an epoch loses), and for the background way the time until the file
has landed (what runs beside the next epoch). On CUDA (``--device cuda``, the default when there is one)
the state lives on the GPU, as a trial's does, and the copy is the device-to-host transfer. The epoch's wait
ends when the training stream has run what the save queued on it (the next epoch's kernels queue behind
that); a packed state's transfer runs on a side stream beside them and is counted in "whole".

    python benchmarks/bench_checkpoint.py                   # 5 rounds
    python benchmarks/bench_checkpoint.py --memory 60000    # an SOP-sized memory (60,000 x 512: +123 MB)
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xbm.training.checkpoint import CheckpointWriter  # noqa: E402
from xbm.training.host_buffers import HostBuffers  # noqa: E402


def trainer_like_state(device: torch.device, memory_rows: int) -> dict:
    """Weights, AdamW's moments (one step taken) and a memory: what ``Trainer.state_dict()`` holds in bulk."""
    import timm

    model = timm.create_model("resnet50", pretrained=False, num_classes=512).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(torch.randn(2, 3, 64, 64, device=device)).sum().backward()
    optimizer.step()
    memory = {"embeddings": torch.randn(memory_rows, 512, device=device),
              "labels": torch.randint(0, 100, (memory_rows,), device=device), "pointer": 7}
    return {"epoch": 1, "model": model.state_dict(), "optimizer": optimizer.state_dict(), "xbm": memory}


def megabytes(state) -> float:
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size() / 1e6
    if isinstance(state, dict):
        return sum(megabytes(v) for v in state.values())
    return 0.0


def synchronous(state: dict, path: Path) -> float:
    start = time.perf_counter()
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)
    return time.perf_counter() - start


def training_stream_done() -> None:
    """Wait for what was queued on the training stream: the next epoch's kernels would run after it."""
    if torch.cuda.is_available():
        torch.cuda.current_stream().synchronize()


def background(writer: CheckpointWriter, state: dict, path: Path) -> tuple[float, float]:
    """One epoch's save through the run's writer: the caller's wait, counted until the training stream has run
    what the save queued on it, and the time until the file has landed."""
    start = time.perf_counter()
    writer.save(state, path)
    training_stream_done()
    returned = time.perf_counter() - start
    writer.wait()
    return returned, time.perf_counter() - start


def copy_only(buffers: HostBuffers, state: dict) -> tuple[float, float]:
    """One snapshot into reused buffers: the epoch's wait (as :func:`background`) and the time until the
    snapshot is whole (its events)."""
    start = time.perf_counter()
    _, events = buffers.snapshot(state)
    training_stream_done()
    waited = time.perf_counter() - start
    for event in events:
        event.synchronize()
    return waited, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory", type=int, default=1000, help="memory rows (512-d)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--folder", help="where the files go (default: a temporary folder)")
    args = parser.parse_args()
    device = torch.device(args.device)
    state = trainer_like_state(device, args.memory)
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        sync_s, waited_s, landed_s = [], [], []
        synchronous(state, Path(folder) / "warm-up.pt")   # the first save pays for the disk's and allocator's start
        writer = CheckpointWriter()   # one per run, as xbm-tune train's: its host buffers serve every epoch
        first, _ = background(writer, state, Path(folder) / "background.pt")
        for _ in range(args.rounds):
            sync_s.append(synchronous(state, Path(folder) / "sync.pt"))
            waited, landed = background(writer, state, Path(folder) / "background.pt")
            waited_s.append(waited)
            landed_s.append(landed)
        ways = {"a copy per tensor": HostBuffers(pack=lambda tensor: False),
                "packed per dtype": HostBuffers(pack=lambda tensor: True)}
        copies = {name: [] for name in ways}
        for buffers in ways.values():
            copy_only(buffers, state)   # the first snapshot allocates
        for _ in range(args.rounds):
            for name, buffers in ways.items():
                copies[name].append(copy_only(buffers, state))
    sync, waited, landed = (statistics.median(v) for v in (sync_s, waited_s, landed_s))
    print(f"state {megabytes(state):.0f} MB on {device} ({torch.get_num_threads()} threads); medians of "
          f"{args.rounds} interleaved rounds")
    print(f"{'torch.save (what an epoch waited before)':<56}{sync:8.3f} s")
    print(f"{'CheckpointWriter.save: the first epoch waits':<56}{first:8.3f} s  {first / sync:5.2f}x  "
          f"(allocates the host buffers{', pinned' if device.type == 'cuda' else ''})")
    print(f"{'CheckpointWriter.save: the epoch waits':<56}{waited:8.3f} s  {waited / sync:5.2f}x")
    print(f"{'CheckpointWriter.save: the file has landed':<56}{landed:8.3f} s  {landed / sync:5.2f}x")
    base = statistics.median(w for w, _ in copies["a copy per tensor"])
    for name, rounds in copies.items():
        wait, whole = statistics.median(w for w, _ in rounds), statistics.median(h for _, h in rounds)
        print(f"{'the copy alone, ' + name + ': the epoch waits':<56}{wait:8.3f} s  {wait / base:5.2f}x  "
              f"(whole after {whole:.3f} s)")
    if device.type == "cpu":
        print("(on the CPU the writer copies per tensor; the packed row is the tests' stand-in of the GPU's way, "
              "which allocates its gathering buffer from the system each time: torch's caching allocator keeps "
              "it on a GPU)")


if __name__ == "__main__":
    main()
