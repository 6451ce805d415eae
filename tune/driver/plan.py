"""Plan a sweep: validate everything before Ray starts or a folder is created.

Order matters for "bad input writes nothing", and each step is one module, visited once, in the order a
sweep needs them (``prepare``): the options resolved against the space (``tune.driver.options.resolve_space``:
``--set``, ``--smoke-test``, the experiment's name, absolute paths), the workers (``tune.driver.workers``), the
base TrainConfig, metric, data sets and ``pretrained_path`` (opened once, here on the driver:
``tune.driver.checks``), ASHA's rungs and their fairness (``tune.search.rungs``), the storage and the
experiment's folder (``tune.results.parquet.check_new_experiment``), the searcher (with the warm-start points
read from the old sweep), the scheduler and the ``--log`` loggers (their packages). The searcher and the scheduler it builds are
the sweep's own (kept on the plan, built once): building them is what checks the registry names, the
search/warm-start pairing and the warm-start points.

Paths (``xbm.data.inputs.PATH_KEYS``) are absolute from ``prepare`` on: ``--set`` values against the launch
directory, space-file values against the file's folder (``tune.search.spaces.loader``). Trials run in their
own trial directories, so a relative path would point elsewhere there. ``sweep.json`` records them under
``paths`` (the non-swept ones): where the sweep's files are now. ``resume --set data_root=NEW`` and
``confirm --set data_root=NEW`` move a sweep to files elsewhere (``relocated``): ``paths`` is updated,
the trials read there, and their rows' ``config.data_root`` says so from then on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from analysis.contract import SweepRecord
from tune.driver.checks import check_sweep_inputs
from tune.driver.options import SweepOptions, resolve_space
from tune.driver.workers import check_space
from tune.errors import SweepInputError
from tune.results.loggers import build_loggers
from tune.results.parquet import RESULTS, check_new_experiment
from tune.search.guards import GuardedScheduler
from tune.search.interfaces import SearchAlg
from tune.search.optuna_study import live_journal
from tune.search.rungs import plan_rungs
from tune.search.schedulers import build_scheduler
from tune.search.searchers import build_searcher
from tune.search.spaces.space import OPTUNA_SEARCHES, SearchSpace
from tune.search.warm_start import WarmStart
from xbm.data.inputs import absolute_paths


@dataclass
class SweepPlan:
    """Everything a sweep needs, validated, before anything runs. ``searcher`` (with ``swept_space``, the
    Tune param_space of the swept parameters) and ``scheduler`` (filling ``stop_reasons``) are used by one
    Tuner: a plan runs once."""

    space: SearchSpace
    options: SweepOptions
    experiment: str
    max_epochs: int
    warnings: list[str] = field(default_factory=list)
    warm: WarmStart | None = None
    searcher: SearchAlg | None = None
    swept_space: dict[str, Any] = field(default_factory=dict)
    scheduler: GuardedScheduler | None = None
    stop_reasons: dict[str, str] = field(default_factory=dict)
    loggers: list[Any] = field(default_factory=list)  # --log: Ray's W&B / MLflow callbacks (tune.results.loggers)
    rungs: tuple[int, ...] | None = None  # ASHA's rung epochs (--rungs; tune.search.rungs), None for another scheduler

    @property
    def experiment_uri(self) -> str:
        return f"{self.options.storage_path()}/{self.experiment}"

    @property
    def results_uri(self) -> str:
        return f"{self.experiment_uri}/{RESULTS}"

    @property
    def optuna_journal(self) -> str | None:
        """The live Optuna study's file (an Optuna searcher on a local folder), else None."""
        return live_journal(self.results_uri) if self.options.search in OPTUNA_SEARCHES else None


def prepare(space_name: str, options: SweepOptions) -> SweepPlan:
    """Load and check everything a sweep needs before Ray starts.

    Args:
        space_name: a shipped space's name (``quickstart``) or a YAML path.
        options: the sweep's options (the CLI's flags: ``tune.commands._arguments.options_from``).

    Returns:
        The plan :func:`tune.driver.sweep.run_sweep` runs: the space, its searcher and scheduler, the Parquet sink and
        the options as resolved (``--smoke-test`` applied, paths made absolute, the space's seed).

    Raises:
        SpaceError: the space file is invalid (naming the file and the key).
        SweepInputError: a flag that does not fit the space (a metric its trials do not report, a searcher that
            cannot sample it, a storage folder that holds another sweep).
        ValueError: the space's fixed values are not a valid ``TrainConfig``.
    """
    space, options = resolve_space(space_name, options)   # --set, --smoke-test, the name, absolute paths
    space.check_search(options.search)
    space = check_space(space, options)  # a space's own workers; each rank's share of the batch, named after the flag
    max_epochs = check_sweep_inputs(space, options)   # the base config, the metric, the data, the grace period
    rungs = plan_rungs(options, space, max_epochs)   # ASHA's rungs and the fairness of stopping there
    warnings = rungs.warnings + list(filter(None, [space.combination_warning()]))
    check_new_experiment(options.storage, options.name)   # nothing is read or written yet
    # the study stays in memory until the sweep's folder exists (tune.driver.sweep.start keeps it in the journal)
    searcher, swept_space, warm = build_searcher(space, options, max_epochs)
    stop_reasons: dict[str, str] = {}
    scheduler = build_scheduler(rungs.options, max_epochs, stop_reasons, space)
    loggers = build_loggers(options.loggers, options.storage, options.name)  # a missing package: exit 2
    return SweepPlan(space, options, options.name, max_epochs, warnings, warm, searcher, swept_space, scheduler,
                     stop_reasons, loggers, rungs.epochs)


def relocated(record: SweepRecord, changes: Mapping[str, Any], allowed: tuple[str, ...],
              command: str) -> dict[str, Any]:
    """The sweep's recorded paths (``sweep.json`` ``paths``) updated with ``changes`` (``--set`` on
    ``resume`` / ``confirm``), made absolute against the working directory. A key outside ``allowed``,
    or a swept one (each trial has its own value), raises SweepInputError."""
    swept = set(record.swept)
    for key in changes:
        if key not in allowed or key in swept:
            raise SweepInputError(
                f"{command} --set must name one of {list(k for k in allowed if k not in swept)} (files at another "
                f"location), but got {key!r}: other keys change what the trials learn; start a new sweep, or "
                f"re-run chosen configs with `xbm-tune confirm PATH --set KEY=VALUE`")
    return {**record.paths, **absolute_paths(changes, Path.cwd())}
