"""The sweep's Optuna study on disk, for ``optuna-dashboard``: live for optuna sweeps, rebuilt from Parquet
for any other (``xbm-tune export-optuna PATH``).

Live: an ``--search optuna`` sweep on a local folder keeps its searcher's study in
``<sweep>/results/optuna.journal`` (Optuna's ``JournalStorage`` over ``JournalFileBackend``: an append-only
log that readers replay, safe to read while the driver writes), study name = the sweep's name. It holds
what the searcher tells Optuna: each trial's params, its metric per epoch as intermediate values (step =
epoch), ``PRUNED`` for trials stopped before the epoch budget, ``COMPLETE`` with the final value,
``FAIL`` for errors, the objective named after the metric, and user attribute ``ray_trial_id`` = Ray's
trial id (warm-start points carry ``warm_start`` instead). ``optuna-dashboard <sweep>/results/optuna.journal`` shows it while it runs.
Sweeps on a bucket (``s3://``) keep the study in memory only; export it afterwards.

Export: the same study from ``results/trials.parquet`` and ``results/epochs/``: for each sweep-stage trial,
its params (the space's, as enqueued Optuna points; a grid param as a categorical over its values), the
metric per epoch, and the state its status maps to (``completed`` -> COMPLETE with ``final_<metric>``,
``stopped_early`` -> PRUNED, ``failed`` -> FAIL, ``running`` stays RUNNING). Works for grid, random and
optuna sweeps, finished or not. The journal is written only once the study is whole: a refused export
leaves no file (nor any change to an existing one).
"""
from __future__ import annotations

import os
import tempfile
from typing import Any, Mapping

from analysis.contract import TRIALS_FILE, SweepRecord
from analysis.location import Folder, absolute, local_path
from tune.errors import SweepInputError
from tune.results.parquet import RESULTS, SWEEP_JSON, finite

JOURNAL = "optuna.journal"
#: the user attribute that holds Ray's trial id (Optuna's own ``trial_id`` is its storage key)
RAY_TRIAL_ID = "ray_trial_id"
STATES = {"completed": "COMPLETE", "stopped_early": "PRUNED", "failed": "FAIL"}


def journal_storage(path: str):
    """An Optuna storage on the journal file ``path`` (created with its folder if missing)."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return JournalStorage(JournalFileBackend(path))


def live_journal(results_uri: str) -> str | None:
    """Where a sweep with results in ``results_uri`` keeps its live study: a local path, or None on a bucket."""
    root = local_path(results_uri)
    return None if root is None else os.path.join(root, JOURNAL)


def export_optuna(path: str, out: str | None = None) -> tuple[str, str, dict[str, int]]:
    """Build the sweep's study from its Parquet into ``out`` (default ``<sweep>/results/optuna.journal``, or
    ``./<name>.optuna.journal`` for a bucket). Returns (journal path, study name, trials per state)."""
    uri = absolute(path.rstrip("/"))
    results = Folder(f"{uri}/{RESULTS}")
    if not results.exists(SWEEP_JSON) or not results.exists("trials.parquet"):
        raise SweepInputError(f"export-optuna needs a sweep folder with {RESULTS}/{SWEEP_JSON} and "
                              f"{RESULTS}/trials.parquet, but {path!r} lacks one")
    record = SweepRecord.from_dict(results.read_json(SWEEP_JSON))
    name = record.experiment or uri.rsplit("/", 1)[-1]
    out = out or live_journal(f"{uri}/{RESULTS}") or f"{name}.optuna.journal"
    if name in study_names(out):
        raise SweepInputError(f"{out} already holds a study named {name!r} (an optuna sweep's live study, or an "
                              f"earlier export): open it with `optuna-dashboard {out}`, or export elsewhere with --out")
    # built whole in a side file, moved or appended to ``out`` only then: a refused trial leaves ``out`` as
    # it was (an empty journal left behind would hide the failure from the next look)
    partial = f"{out}.partial"
    try:
        if os.path.exists(partial):  # left by an export that was killed
            os.remove(partial)
        counts = build_study(partial, name, record, results)
        publish(partial, out, name)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return out, name, counts


def study_names(path: str) -> list[str]:
    """The studies in the journal ``path``; none when it is missing (opening a storage there would create it)."""
    import optuna

    if not os.path.exists(path):
        return []
    return [s.study_name for s in optuna.get_all_study_summaries(journal_storage(path))]


def build_study(path: str, name: str, record: SweepRecord, results: Folder) -> dict[str, int]:
    """Write the study ``name`` of the sweep-stage trials in ``results`` to the journal ``path``; return
    the trials per state."""
    import optuna

    metric, space = record.metric, space_of(record)
    study = optuna.create_study(study_name=name, storage=journal_storage(path),
                                sampler=optuna.samplers.RandomSampler(0),
                                direction="maximize" if record.mode == "max" else "minimize")
    name_objective(study, metric)
    counts: dict[str, int] = {}
    for row in results.read_table(TRIALS_FILE).to_pylist():
        if (row.get("stage") or "sweep") != "sweep":
            continue
        epochs = results.read_table(f"epochs/{row['trial_id']}.parquet")
        curve = [(r["epoch"], r.get(metric)) for r in (epochs.to_pylist() if epochs is not None else [])]
        state = add_trial(study, space, row, curve, metric)
        counts[state] = counts.get(state, 0) + 1
    return counts


def publish(partial: str, out: str, name: str) -> None:
    """Put the finished study of the journal ``partial`` into ``out``: the file itself when ``out`` is new,
    else appended to it (a journal that holds other studies keeps them)."""
    import optuna

    if not os.path.exists(out):
        os.replace(partial, out)
        return
    optuna.copy_study(from_study_name=name, from_storage=journal_storage(partial), to_storage=journal_storage(out))


def name_objective(study, metric: str | list[str]) -> None:
    """Name the objective(s) after the sweep's metric(s) (optuna-dashboard shows them instead of "Objective 0")."""
    import warnings

    with warnings.catch_warnings():  # set_metric_names is marked experimental
        warnings.simplefilter("ignore")
        study.set_metric_names(list(metric) if isinstance(metric, (list, tuple)) else [metric])


def add_trial(study, space, row: Mapping[str, Any], curve: list[tuple[int, Any]], metric: str) -> str:
    """Ask ``study`` for the trial's params (enqueued, then suggested by the space as the live searcher does,
    a grid param as a categorical), report its curve, tell its state; return the state's name."""
    from optuna.trial import TrialState

    point = {k: row[f"config.{k}"] for k in space.params if row.get(f"config.{k}") is not None}
    study.enqueue_trial(point, skip_if_exists=False)
    trial = study.ask()
    try:
        space.define_by_run(trial, grid_as_choice=True)
    except ValueError as exc:  # a choice the space does not offer
        raise SweepInputError(f"trial {row['trial_id']}: its params {point} are not a point of the sweep's "
                              f"space ({exc})") from None
    if trial.params != point:  # Optuna samples instead of a point outside the space: say so, never guess
        raise SweepInputError(f"trial {row['trial_id']}: its params {point} are not a point of the sweep's "
                              f"space (Optuna suggested {trial.params})")
    trial.set_user_attr(RAY_TRIAL_ID, row["trial_id"])
    for epoch, value in sorted(curve):
        if finite(value):
            trial.report(float(value), int(epoch))
    state = STATES.get(row.get("status"))
    if state is None:
        return "RUNNING"
    value = row.get(f"final_{metric}")
    if state == "COMPLETE" and not finite(value):
        state = "FAIL"
    study.tell(trial, float(value) if state == "COMPLETE" else None, state=TrialState[state])
    return state


def space_of(record: SweepRecord):
    """The sweep's space as the sweep resolved it: its YAML text with the sweep's ``--set`` overrides."""
    from tune.search.spaces import load_space

    text = record.space.text
    if not text:
        raise SweepInputError("sweep.json has no space text: this sweep cannot be exported")
    overrides = dict(record.option("overrides") or {})
    if record.max_epochs is not None:
        overrides["epochs"] = record.max_epochs
    with tempfile.TemporaryDirectory() as folder:
        file = os.path.join(folder, f"{record.space.name or 'space'}.yaml")
        with open(file, "w") as stream:
            stream.write(text)
        return load_space(file, overrides=overrides or None)
