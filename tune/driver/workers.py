"""The shape of a trial that is a data-parallel run of several workers, and its checks.

A sweep's options give each trial ``workers`` Ray Train workers of ``cpus_per_trial`` CPUs and
``gpus_per_worker`` GPUs each (``SweepOptions.workers``; ``--gpus-per-trial N`` alone is N workers of one
GPU). The trial itself is a Tune function that launches a ``TorchTrainer`` (``tune.trial.data_parallel``); Ray
Train V2 reserves its workers in a placement group of its own, which cannot draw on the Tune trial's, so
Tune's request for a multi-worker trial is only the launcher's small bundle (``launcher_resources``), and
the whole footprint is accounted for by capping the trials run at once to those whose workers fit in the
cluster (``max_concurrent``: Ray's Train-in-Tune guide, "Set max_concurrent_trials"). A Train run starts
only once all its workers are placed at once, so runs wait for each other but never hold half a footprint:
no deadlock, even with more trials than fit.

Bad input is refused with the flag and the rule before Ray starts (``check_space``) or, for the nodes'
GPUs, once Ray is connected and before anything is written (``check_node_gpus``).
"""
from __future__ import annotations

import functools
import itertools
import math
from typing import Any, Iterable, Mapping

from tune.driver.options import SweepOptions
from tune.errors import SweepInputError
from tune.results.trial_config import WORKERS_KEY
from xbm.checks import batch_split_problem
from xbm.config import TrainConfig

#: what the launcher of a multi-worker trial asks Tune for: it only starts the workers and forwards reports
LAUNCHER_CPU = 0.01


def launcher_resources(options: SweepOptions) -> dict[str, float]:
    """What Tune reserves for one trial: the trial's own CPUs and GPUs with one worker (it trains in the
    Tune actor), else the launcher's bundle alone (the workers are Ray Train's)."""
    if options.workers == 1:
        return {"cpu": options.cpus_per_trial, "gpu": options.gpus_per_trial}
    return {"cpu": LAUNCHER_CPU, "gpu": 0.0}


def worker_resources(options: SweepOptions) -> dict[str, float]:
    """One worker's resources, as Ray Train's ``ScalingConfig.resources_per_worker`` wants them."""
    resources = {"CPU": float(options.cpus_per_trial)}
    if options.gpus_per_worker > 0:
        resources["GPU"] = float(options.gpus_per_worker)
    return resources


def check_space(space, options: SweepOptions):
    """Before Ray starts: ``workers`` is the flag's, never a space's or ``--set``'s (the resources are the
    sweep's), and every global batch the space can give splits into whole classes per rank. Returns the space
    with ``workers`` pinned when it is > 1, so that each trial's TrainConfig knows them (``config.workers``)."""
    from tune.search.spaces import pin_space

    workers = options.workers
    if WORKERS_KEY in space.params:
        raise SweepInputError(f"the space must not sweep {WORKERS_KEY!r}: a trial's workers are the sweep's "
                              f"resources; run one sweep per --workers-per-trial value")
    given = space.base.get(WORKERS_KEY)
    if given is not None and int(given) != workers:
        raise SweepInputError(f"--workers-per-trial must give the trials' workers, but the space or --set says "
                              f"{WORKERS_KEY}={given} while the flags give {workers}; drop {WORKERS_KEY} from the "
                              f"space and --set, and use --workers-per-trial")
    if workers > 1:
        check_batch_split(_values(space, "batch_size"), _values(space, "samples_per_class"),
                          _values(space, "objective"), workers, neighbours_k=_values(space, "neighbours.k"),
                          bn_splits=_values(space, "moco.bn_splits"), samplers=_values(space, "sampler"))
    if workers > 1 and options.gpus_per_trial > 0 and "cpu" in _values(space, "device"):
        raise SweepInputError("device=cpu cannot run a data-parallel trial on GPUs: its workers talk over NCCL, "
                              "which carries CUDA tensors only (the first gather of CPU tensors fails); drop "
                              "device=cpu (device=auto trains on the trial's GPUs), or set --gpus-per-trial 0")
    return pin_space(space, {WORKERS_KEY: workers}) if workers > 1 and given is None else space


def check_batch_split(batch_sizes: Iterable[int], samples_per_class: Iterable[int], objectives: Iterable[str],
                      workers: int, flag: str = "--workers-per-trial", neighbours_k: Iterable[int] = (None,),
                      bn_splits: Iterable[int] = (None,), samplers: Iterable[str] = (None,)) -> None:
    """Every combination of the given values splits over ``workers`` ranks by the config's one rule
    (:func:`xbm.config.batch_split_problem`: whole classes, whole neighbour tuples, MoCo's sub-batches shared
    out); the error names ``flag`` and the batch size that would split. None: the TrainConfig default."""
    default = TrainConfig()
    for batch, per_class, objective, k, splits, sampler in itertools.product(batch_sizes, samples_per_class,
                                                                              objectives, neighbours_k, bn_splits,
                                                                              samplers):
        if batch is None:
            continue
        problem = batch_split_problem(batch, workers, objective, per_class,
                                      default.neighbours.k if k is None else k,
                                      default.moco.bn_splits if splits is None else splits,
                                      default.sampler if sampler is None else sampler)
        if problem is None:
            continue
        if problem.field != "batch_size":
            raise SweepInputError(f"{flag} {workers} needs {problem.field} to be {problem.rule}, but got "
                                  f"{problem.field}={problem.value}; change {problem.field} or {flag}")
        rule = (f"a multiple of {workers} x {problem.unit_name}, so that each rank draws whole {problem.what}"
                if problem.unit > 1 else f"a multiple of {workers}, one share per rank")
        multiple = workers * problem.unit
        raise SweepInputError(f"{flag} {workers} needs batch_size (the global batch) to be {rule}, "
                              f"but got batch_size={batch} ({batch / workers:g} rows per rank); use batch_size="
                              f"{max(1, round(batch / multiple)) * multiple}")


def _values(space, key: str) -> list:
    """Every value of ``key`` the space can give: its swept values (discrete) or its base value; the
    TrainConfig default when the space says nothing. A continuous swept value is checked in its trial."""
    if key in space.params:
        return space.params[key].possible_values() or []
    return [space.base.get(key, functools.reduce(getattr, key.split("."), TrainConfig()))]


def check_node_gpus(options: SweepOptions, nodes: Iterable[Mapping[str, Any]]) -> None:
    """Once Ray is connected: a trial's GPUs must fit on one node (Ray Train packs a trial's workers; a
    trial larger than every node would wait forever). The error names every node's GPU count."""
    need = options.trial_gpus
    if need <= 0:
        return
    alive = [n for n in nodes if n.get("Alive", True)]
    counts = {_node_name(n): float(n.get("Resources", {}).get("GPU", 0.0)) for n in alive}
    if any(count >= need for count in counts.values()):
        return
    shown = ", ".join(f"{name}: {count:g}" for name, count in counts.items()) or "no nodes"
    flag = (f"--gpus-per-trial {options.gpus_per_trial:g}" if options.workers_per_trial == 1
            else f"--workers-per-trial {options.workers} x --gpus-per-trial {options.gpus_per_trial:g}")
    raise SweepInputError(f"{flag} asks {need:g} GPUs per trial, more than any node has (GPUs per node: {shown}); "
                          f"ask for at most the largest node's GPUs per trial")


def _node_name(node: Mapping[str, Any]) -> str:
    host = node.get("NodeManagerHostname") or node.get("NodeManagerAddress", "?")
    return f"{host} ({str(node.get('NodeID', ''))[:8]})"


def max_concurrent(options: SweepOptions, nodes: Iterable[Mapping[str, Any]], own_ray: bool = False) -> int | None:
    """The trials that may run at once: ``--max-concurrent``, capped for multi-worker trials by the trials
    whose workers fit on the connected cluster's nodes together (at least 1). One-worker trials: as given
    (Tune's own placement groups count their resources). On a Ray this command started itself (``own_ray``:
    no autoscaler will add nodes), a trial that can never fit is refused (SweepInputError): its Train run
    would wait forever, silently."""
    if options.workers == 1:
        return options.max_concurrent
    per_worker = worker_resources(options)
    alive = [node.get("Resources", {}) for node in nodes if node.get("Alive", True)]
    fits = sum(min(math.floor((have.get(k, 0.0) + 1e-9) / v) for k, v in per_worker.items() if v > 0)
               for have in alive)
    trials = max(1, fits // options.workers)
    # each trial's launcher holds LAUNCHER_CPU too: 2 trials of 2 one-CPU workers do not fit in 4 CPUs
    cpus = sum(have.get("CPU", 0.0) for have in alive)
    need = options.workers * per_worker["CPU"] + LAUNCHER_CPU
    if own_ray and (fits < options.workers or need > cpus + 1e-9):
        share = math.floor((cpus - LAUNCHER_CPU) / options.workers * 100) / 100
        each = ", ".join(f"{amount:g} {kind}" for kind, amount in per_worker.items())
        raise SweepInputError(f"--workers-per-trial {options.workers} x ({each}) per worker, plus the trial's "
                              f"launcher ({LAUNCHER_CPU:g} CPU), never fit on this Ray ({cpus:g} CPUs): the trial "
                              f"would wait forever. Lower --cpus-per-trial (at most {share:g} for "
                              f"{options.workers} workers here) or --workers-per-trial, or run on a larger Ray "
                              f"(--address)")
    while trials > 1 and trials * need > cpus + 1e-9:
        trials -= 1
    return trials if options.max_concurrent is None else min(options.max_concurrent, trials)
