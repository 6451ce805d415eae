"""The processes of benchmarks/bench_gpu.py's rows: started together, their phases printed as they come, a
time cap per row, and none left behind however the parent stops.

A row's process puts ``("phase", index, wall time, text)`` messages (``gpu_phases.Phases``) and one
``("result", index, result)`` on a queue. :func:`run_processes` prints each phase with the row's name and the
seconds since it started the processes; a process that dies without a result is reported with its exit
code; after ``timeout`` seconds the rows without a result are reported as timed out, naming their last
phase, and their processes are ended. SIGTERM (``timeout``'s signal) raises :class:`Cut` in the parent once
:func:`on_sigterm` is installed, so the caller prints what finished.
"""
from __future__ import annotations

import queue as queues
import signal
import time
from typing import Callable, Optional

from gpu_rows import child


class Cut(Exception):
    """SIGTERM (e.g. from ``timeout``): stop the rows, print what finished."""


def _cut(signum, frame):
    raise Cut(signal.Signals(signum).name)


def on_sigterm(handler=_cut):
    """Raise :class:`Cut` on SIGTERM from now on (or install ``handler``, e.g. the previous one, which this
    returns)."""
    return signal.signal(signal.SIGTERM, handler)


def run_processes(context, jobs: list[tuple[str, dict]], barrier=None, names: Optional[list[str]] = None,
                  timeout: Optional[float] = None, target: Callable = child) -> list[dict]:
    """Start ``jobs`` (kind, spec) together, each in its own process running ``target(kind, spec, queue,
    barrier)``; their results in job order (module docstring). On any exit (a ``Cut`` too) no process is left."""
    queue = context.Queue()
    names = names or [kind for kind, _ in jobs]
    started = time.time()
    deadline = None if timeout is None else started + timeout
    processes = [context.Process(target=target, args=(kind, {**spec, "index": i, "started": started}, queue, barrier))
                 for i, (kind, spec) in enumerate(jobs)]
    results: dict[int, dict] = {}
    last: dict[int, str] = {}

    def take(message) -> None:
        what, index, *rest = message
        if what == "phase":
            at, text = rest
            last[index] = text
            print(f"    [{names[index]} {at - started:6.1f} s] {text}", flush=True)
        else:
            results[index] = rest[0]

    try:
        for process in processes:
            process.start()
        while len(results) < len(jobs):
            wait = 1.0 if deadline is None else min(1.0, deadline - time.time())
            if wait <= 0:
                _drain(queue, take)  # what arrived by the deadline counts
                for i in sorted(set(range(len(jobs))) - set(results)):
                    results[i] = {"error": f"timed out after {timeout:.0f} s (--row-timeout), last phase: "
                                           f"{last.get(i, 'none reported')}", "timeout": True}
                break
            try:
                take(queue.get(timeout=wait))
            except queues.Empty:  # did a process die without a word (killed, segfault)?
                for i, process in enumerate(processes):
                    if i not in results and not process.is_alive() and queue.empty():
                        results[i] = {"error": f"the process died with exit code {process.exitcode}, last phase: "
                                               f"{last.get(i, 'none reported')}"}
                        if barrier is not None:  # the others would wait at the barrier for it forever
                            barrier.abort()
    finally:
        end(processes)
    return [results[i] for i in range(len(jobs))]


def _drain(queue, take: Callable) -> None:
    while True:
        try:
            take(queue.get(timeout=0.1))
        except queues.Empty:
            return


def end(processes) -> None:
    """Terminate the processes still running (their loader workers follow them), then kill any left."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        if process.pid is not None:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()
