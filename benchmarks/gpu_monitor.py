"""GPU utilisation sampled in a thread (benchmarks/bench_gpu.py): NVML through ``torch.cuda.utilization``,
else ``nvidia-smi``; nothing on a machine without CUDA (the figure is then "n/a").

The figure is NVML's "percent of time over the past sample period during which one or more kernels was
executing": a GPU kept busy by small kernels reads 100 %, so it says whether the GPU waited (for data,
for the host), not how well it computes. It is device-wide: trials sharing a GPU see each other's work.
"""
from __future__ import annotations

import subprocess
import threading
import time
from typing import Callable, Optional

import torch


def _reader() -> Optional[Callable[[], float]]:
    if not torch.cuda.is_available():
        return None
    try:
        torch.cuda.utilization()
        return lambda: float(torch.cuda.utilization())
    except Exception:  # no pynvml / amdsmi: ask nvidia-smi
        pass
    index = torch.cuda.current_device()
    command = ["nvidia-smi", f"--id={index}", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
    try:
        float(subprocess.run(command, capture_output=True, text=True, timeout=10).stdout.strip())
    except Exception:
        return None
    return lambda: float(subprocess.run(command, capture_output=True, text=True, timeout=10).stdout.strip())


class UtilisationSampler:
    """``with sampler:`` samples every ``period`` seconds; ``mean(windows)`` averages the samples taken
    inside the given (start, end) ``time.perf_counter`` windows (all samples when ``windows`` is empty)."""

    def __init__(self, period: float = 0.2) -> None:
        self.period = period
        self.read = _reader()
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.perf_counter(), self.read()))
            except Exception:  # a failed read loses one sample, not the run
                pass
            self._stop.wait(self.period)

    def __enter__(self) -> "UtilisationSampler":
        if self.read is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def mean(self, windows: list[tuple[float, float]] = ()) -> Optional[float]:
        inside = [u for t, u in self.samples if not windows or any(a <= t <= b for a, b in windows)]
        return sum(inside) / len(inside) if inside else None
