"""A sweep's options: one frozen dataclass, validated before Ray starts (each error: rule and value).

The CLI flags map one to one (``--num-samples`` -> ``num_samples``); ``sweep.json`` stores them.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from analysis.location import absolute, is_uri
from analysis.sweep_record import Objectives
from tune.errors import SweepInputError
from tune.search.spaces.fairness import GEOMETRIC_RUNGS, SCHEDULE_RUNGS
from xbm.checks import checker, parse_milestones

DEFAULT_STORAGE = "~/xbm_sweeps"
METRIC_MODES = ("max", "min")
#: schedulers that change configs during a run (``mutable: true`` params, exploits, a checkpoint per interval)
POPULATION_SCHEDULERS = ("pbt", "pb2")

if TYPE_CHECKING:
    from tune.search.spaces.space import SearchSpace

_check = checker(error=SweepInputError)


@dataclass(frozen=True)
class SweepOptions(Objectives):
    """What ``xbm-tune sweep`` runs. ``max_epochs`` None keeps the space's (or TrainConfig's) epochs.

    ``workers_per_trial`` > 1 makes each trial a data-parallel run of that many Ray Train workers
    (``tune.trial.data_parallel``); ``cpus_per_trial`` and ``gpus_per_trial`` are then per worker, and a whole
    ``gpus_per_trial`` > 1 alone is shorthand for that many workers of one GPU each (``workers``,
    ``gpus_per_worker``, ``trial_gpus`` give the resolved shape).

    ``cpus_per_trial`` ``auto`` is resolved once Ray is connected (``tune.trial.resources``); ``checkpoint_period``
    is in seconds of a trial's epochs (``tune.trial.checkpoints``). ``stop_collapsed``, ``time_budget_s`` and
    ``gpu_hours_budget`` are the guards every scheduler carries (``tune.search.guards``).

    Several objectives: ``metric``/``mode`` are the first (what ASHA stops on), ``extra_metrics`` /
    ``extra_modes`` the others (``--metric recall_at_1:max --metric gpu_hours:min``); ``metrics``/``modes``
    give them all.

    ``seed`` seeds the searcher (TPE, random) and is every trial's ``seed`` unless the space or
    ``--set`` gives one: trials then differ by config only (common random numbers), which is what a
    comparison of configs wants; the ``confirm`` stage varies seeds.

    ``rungs``: where ASHA judges trials (``tune.search.rungs``): ``geometric`` (``grace_period`` x
    ``reduction_factor``**k), ``schedule`` (before each LR drop, after the normaliser delay / memory start) or
    a list of epochs ``"2,4"``; sweep.json records the resolved epochs as ``rungs``.

    ``loggers``: where the trials' epochs are also logged (``--log wandb``, ``--log mlflow``; ``tune.results.loggers``).
    """

    num_samples: int | None = None
    search: str | None = None
    scheduler: str = "asha"
    max_epochs: int | None = None
    grace_period: int = 1
    reduction_factor: float = 3.0
    rungs: str = GEOMETRIC_RUNGS
    max_concurrent: int | None = None
    cpus_per_trial: float | str = "auto"
    gpus_per_trial: float = 0.0
    workers_per_trial: int = 1
    checkpoint_period: float = 600.0
    perturbation_interval: int = 2
    pbt_synch: bool = False
    max_failures: int = 2
    metric: str = "recall_at_1"
    mode: str = "max"
    seed: int = 0
    storage: str = DEFAULT_STORAGE
    name: str | None = None
    address: str | None = None
    dashboard: bool = True
    strict: bool = False
    warm_start: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    smoke_test: bool = False
    stop_collapsed: bool = True
    time_budget_s: float | None = None
    gpu_hours_budget: float | None = None
    extra_metrics: tuple[str, ...] = ()
    extra_modes: tuple[str, ...] = ()
    loggers: tuple[str, ...] = ()

    @classmethod
    def from_record(cls, options: Mapping[str, Any]) -> "SweepOptions":
        """The options a ``sweep.json`` recorded (its ``options``), ignoring keys this version lacks."""
        return cls(**{k: v for k, v in options.items() if k in cls.__dataclass_fields__})

    def for_space(self, is_grid: bool) -> "SweepOptions":
        """Fill the defaults that depend on the space: a grid-only space runs ``grid`` search once per
        point; any other runs seeded TPE (``optuna``) for 20 trials."""
        # PBT/PB2 change the configs themselves: the population is drawn at random (a grid cannot be perturbed)
        search = self.search or ("random" if self.population_based else "grid" if is_grid else "optuna")
        num_samples = self.num_samples or (1 if search == "grid" else 20)
        return self.replace(search=search, num_samples=num_samples)

    def __post_init__(self) -> None:
        _check(self.num_samples is None or self.num_samples >= 1, "--num-samples", ">= 1", self.num_samples)
        _check(self.max_epochs is None or self.max_epochs >= 1, "--max-epochs", ">= 1", self.max_epochs)
        _check(self.grace_period >= 1, "--grace-period", ">= 1", self.grace_period)
        _check(self.max_epochs is None or self.grace_period <= self.max_epochs, "--grace-period",
               f"<= --max-epochs ({self.max_epochs})", self.grace_period)
        _check(self.reduction_factor > 1, "--reduction-factor", "> 1", self.reduction_factor)
        _check(self.rungs in (GEOMETRIC_RUNGS, SCHEDULE_RUNGS) or bool(parse_milestones(self.rungs)), "--rungs",
               f"{GEOMETRIC_RUNGS}, {SCHEDULE_RUNGS} or increasing epochs such as 2,4", self.rungs)
        _check(self.rungs == GEOMETRIC_RUNGS or self.scheduler == "asha", "--rungs",
               f"{GEOMETRIC_RUNGS} (the default) unless --scheduler asha", self.rungs)
        _check(self.max_concurrent is None or self.max_concurrent >= 1, "--max-concurrent", ">= 1",
               self.max_concurrent)
        _check(self.cpus_per_trial == "auto" or (isinstance(self.cpus_per_trial, (int, float))
                                                 and self.cpus_per_trial > 0),
               "--cpus-per-trial", "'auto' (the CPUs that come with --gpus-per-trial of a node) or a number > 0",
               self.cpus_per_trial)
        _check(self.perturbation_interval >= 1, "--perturbation-interval", ">= 1 epoch", self.perturbation_interval)
        _check(self.checkpoint_period >= 0, "--checkpoint-period", ">= 0 seconds (0: every epoch)",
               self.checkpoint_period)
        _check(self.gpus_per_trial >= 0, "--gpus-per-trial", ">= 0", self.gpus_per_trial)
        _check(self.gpus_per_trial <= 1 or float(self.gpus_per_trial).is_integer(), "--gpus-per-trial",
               "a fraction <= 1 or a whole number (Ray cannot split more than one GPU)", self.gpus_per_trial)
        _check(isinstance(self.workers_per_trial, int) and self.workers_per_trial >= 1, "--workers-per-trial",
               ">= 1 (workers of one data-parallel trial)", self.workers_per_trial)
        _check(self.workers_per_trial == 1 or self.gpus_per_trial in (0, 1), "--gpus-per-trial",
               "0 or 1 with --workers-per-trial > 1 (it is per worker: a fraction would put two ranks on one GPU, "
               "which NCCL refuses, and a worker uses one GPU)", self.gpus_per_trial)
        _check(self.max_failures >= 0, "--max-failures", ">= 0", self.max_failures)
        _check(self.mode in METRIC_MODES, "--mode", f"one of {list(METRIC_MODES)}", self.mode)
        _check(bool(self.metric), "--metric", "a metric name such as recall_at_1", self.metric)
        _check(self.name is None or (bool(self.name) and "/" not in self.name and self.name not in (".", "..")),
               "--name", "a folder name without '/'", self.name)
        _check(bool(self.storage), "--storage", "a folder or URI", self.storage)
        object.__setattr__(self, "extra_metrics", tuple(self.extra_metrics))  # sweep.json gives lists
        object.__setattr__(self, "extra_modes", tuple(self.extra_modes))
        object.__setattr__(self, "loggers", tuple(self.loggers))
        _check(len(set(self.loggers)) == len(self.loggers), "--log", "each logger once", list(self.loggers))
        _check(len(self.extra_modes) == len(self.extra_metrics), "--metric", "one mode per metric",
               list(zip(self.extra_metrics, self.extra_modes)))
        for name, mode in zip(self.extra_metrics, self.extra_modes):
            _check(bool(name) and mode in METRIC_MODES, "--metric", f"NAME:MODE with MODE one of {list(METRIC_MODES)}",
                   f"{name}:{mode}")
        _check(len(set(self.metrics)) == len(self.metrics), "--metric", "each metric once", list(self.metrics))
        _check(self.time_budget_s is None or self.time_budget_s > 0, "--time-budget", "> 0 seconds",
               self.time_budget_s)
        _check(self.gpu_hours_budget is None or self.gpu_hours_budget > 0, "--gpu-hours-budget", "> 0 GPU hours",
               self.gpu_hours_budget)

    @property
    def population_based(self) -> bool:
        """PBT or PB2: configs change during a run (``POPULATION_SCHEDULERS``)."""
        return self.scheduler in POPULATION_SCHEDULERS

    @property
    def workers(self) -> int:
        """Workers of each trial: ``--workers-per-trial``, or a whole ``--gpus-per-trial`` N > 1 (N workers
        of one GPU each)."""
        if self.workers_per_trial == 1 and self.gpus_per_trial > 1:
            return int(self.gpus_per_trial)
        return self.workers_per_trial

    @property
    def gpus_per_worker(self) -> float:
        return 1.0 if self.workers_per_trial == 1 and self.gpus_per_trial > 1 else float(self.gpus_per_trial)

    @property
    def trial_gpus(self) -> float:
        """The GPUs one trial uses: its workers x each one's GPUs (what ``gpu_hours`` bills)."""
        return self.workers * self.gpus_per_worker

    def replace(self, **changes: Any) -> "SweepOptions":
        return dataclasses.replace(self, **changes)

    def experiment_name(self, space_name: str) -> str:
        """``--name``, else ``<space>-<UTC timestamp>``."""
        return self.name or f"{space_name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"

    def storage_path(self) -> str:
        """Tune wants an absolute local path or a URI."""
        return self.storage.rstrip("/") if is_uri(self.storage) else absolute(self.storage)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "overrides": dict(self.overrides)}


def metric_options(values: list[str] | None, default_mode: str) -> dict[str, Any]:
    """Repeated ``--metric NAME[:MODE]`` -> the options' ``metric``, ``mode``, ``extra_metrics``,
    ``extra_modes`` (a metric without ``:MODE`` takes ``default_mode``, i.e. ``--mode``)."""
    pairs = []
    for text in values or [SweepOptions.metric]:
        name, _, mode = str(text).partition(":")
        pairs.append((name, mode or default_mode))
    return {"metric": pairs[0][0], "mode": pairs[0][1], "extra_metrics": tuple(n for n, _ in pairs[1:]),
            "extra_modes": tuple(m for _, m in pairs[1:])}


def cpus_option(text: str) -> float | str:
    """``--cpus-per-trial``'s value: a number, or the text as given (``auto``; anything else is refused by
    ``SweepOptions`` with its rule)."""
    try:
        return float(text)
    except ValueError:
        return text


#: ``--smoke-test``: a tiny sweep to check an installation or a space in seconds
SMOKE = {"num_samples": 2, "max_epochs": 2, "grace_period": 1}
SMOKE_OVERRIDES = {"dataset": "toy", "model": "mlp", "embedding_size": 32, "warmup_epochs": 0,
                   "batch_size": 128, "samples_per_class": 4, "num_workers": 0,
                   "pretrained": False}
#: ``--smoke-test`` of a space with its own ``smoke:`` section (a study: its data, its comparison at toy sizes):
#: the section's grid gives the points (seeds among them: one sample each) and every point runs to its end
#: (fifo), as the study's analysis needs whole runs; SMOKE_OVERRIDES do not apply
SMOKE_DECLARED = {"num_samples": 1, "max_epochs": 2, "grace_period": 1, "scheduler": "fifo"}


def resolve_space(space_name: str, options: SweepOptions) -> tuple["SearchSpace", SweepOptions]:
    """The space with the values the flags set (``--set``, ``--max-epochs``, ``--seed`` unless the space fixes or
    sweeps the seed; ``--smoke-test``'s reduction), and the options resolved against it: ``--set`` paths absolute
    against the launch directory, the searcher and sample count the space implies (``for_space``), the
    experiment's name, the storage folder absolute. The file is read as written first: what it declares decides
    what the flags add. ``--workers-per-trial`` is pinned later, by ``tune.driver.workers.check_space``, which
    names the flag when the batch does not split (the config's own check would not)."""
    from tune.search.spaces import load_space, pin_space
    from xbm.data.inputs import absolute_paths

    written = load_space(space_name, smoke=options.smoke_test)
    if options.smoke_test:
        options = smoke_options(written, options)
    overrides = absolute_paths(options.overrides, Path.cwd())
    pins = dict(overrides)
    if options.max_epochs is not None:
        pins["epochs"] = options.max_epochs
    if not {"seed"} & (set(written.base) | set(written.params) | set(pins)):
        pins["seed"] = options.seed
    space = pin_space(written, pins) if pins else written
    options = options.replace(overrides=overrides, name=options.experiment_name(space.name),
                              storage=options.storage_path()).for_space(space.is_grid)
    return space, options


def smoke_options(space: "SearchSpace", options: SweepOptions) -> SweepOptions:
    """``--smoke-test``'s options: a space with a ``smoke:`` section runs that reduction (``SMOKE_DECLARED``:
    its own data and grid at toy sizes, each point once, to its end); any other the toy data set
    (``SMOKE``, ``SMOKE_OVERRIDES``). ``--set`` values win over both."""
    if space.smoke:
        return options.replace(**SMOKE_DECLARED, max_concurrent=options.max_concurrent)
    return options.replace(**SMOKE, overrides={**SMOKE_OVERRIDES, **options.overrides},
                           max_concurrent=options.max_concurrent)
