"""Parameter importance with Optuna's evaluators, on an Optuna study rebuilt from the Parquet.

Each trial becomes ``optuna.trial.create_trial(state=COMPLETE, value=..., params=...,
distributions=...)`` added to an in-memory study. Distributions are inferred from the ``config.*``
columns of the varying parameters: booleans and strings -> ``CategoricalDistribution`` over the values
seen; integers -> ``IntDistribution(min, max)``; floats -> ``FloatDistribution(min, max, log)``, with
``log`` as the space in sweep.json declares it (``loguniform``), else for the usual log-scale
parameters (``analysis.effects.LOG_PARAMS``) or a range spanning two decades. A parameter absent from
a trial (conditional space) is absent from its Optuna params, and Optuna assesses only parameters
present in every trial, so conditional parameters are listed in ``excluded`` with the share of trials
that have them.

Value per trial: ``best_<metric>`` of trials that finished their epoch budget (``values.finished``;
ASHA-stopped trials would enter with values from fewer epochs), or, with ``at_epoch=e``, the metric
at epoch ``e`` of every trial that reached it (a fair comparison across ASHA's survivors and the
culled, at e.g. the first rung; ``common_epoch`` picks it when few trials finished).

Evaluators (``EVALUATORS``): ``fanova`` (Hutter et al., 2014, functional ANOVA on a random forest),
``mean_decrease_impurity`` (a random forest's impurity decrease), ``ped_anova`` (Watanabe et al.,
2023). If the chosen one fails (too few trials for its model), ``fallback`` is tried and the result
says which evaluator produced it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from analysis.columns import KEY, param_name, varying_columns
from analysis.effects import is_log_scale
from analysis.errors import NotApplicable
from analysis.loader import Sweep
from analysis.values import finished, metric_values

MIN_TRIALS = 3
MIN_FINISHED = 8  # below this many full-budget trials, compare every trial at a common epoch instead


def _evaluator(name: str, seed: int):
    import optuna.importance as oi
    factories = {
        "fanova": lambda: oi.FanovaImportanceEvaluator(seed=seed),
        "mean_decrease_impurity": lambda: oi.MeanDecreaseImpurityImportanceEvaluator(seed=seed),
        "ped_anova": lambda: oi.PedAnovaImportanceEvaluator(),
    }
    if name not in factories:
        raise ValueError(f"unknown importance evaluator {name!r}; valid: {sorted(factories)}")
    return factories[name]()


EVALUATORS = ("fanova", "mean_decrease_impurity", "ped_anova")


@dataclass(frozen=True)
class Importance:
    table: pd.DataFrame  # param, importance (normalised to sum 1), most important first
    evaluator: str
    n_trials: int
    value: str
    excluded: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # evaluator -> why it failed


def _targets(sweep: Sweep, metric: str, stage: str, at_epoch: int | None) -> tuple[pd.DataFrame, pd.Series, str]:
    trials = sweep.stage_trials(stage)
    if at_epoch is None:
        value = metric_values(sweep, metric, stage)
        keep = finished(trials) & value.notna()
        return trials[keep], value[keep], f"best_{metric} of trials that finished their epoch budget"
    epochs = sweep.stage_epochs(stage)
    if metric not in epochs.columns:
        raise NotApplicable(f"no epoch row reports {metric!r}")
    at = epochs[epochs["epoch"] == at_epoch].dropna(subset=[metric]).set_index(KEY)[metric]
    value = pd.Series(at.reindex(pd.MultiIndex.from_frame(trials[KEY])).to_numpy(dtype=float), index=trials.index)
    keep = value.notna()
    return trials[keep], value[keep], f"{metric} at epoch {at_epoch} (every trial that reached it)"


def _distribution(column: str, values: pd.Series, declared: dict[str, bool]):
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    present = values.dropna()
    if pd.api.types.is_bool_dtype(values):
        return CategoricalDistribution([False, True]), lambda v: bool(v)
    if not pd.api.types.is_numeric_dtype(values):
        return CategoricalDistribution(sorted(present.astype(str).unique())), lambda v: str(v)
    low, high = present.min(), present.max()
    if pd.api.types.is_integer_dtype(values):
        return IntDistribution(int(low), int(high)), lambda v: int(v)
    log = is_log_scale(column, present.astype(float), None, declared)
    return FloatDistribution(float(low), float(high), log=log), lambda v: float(v)


def common_epoch(sweep: Sweep, stage: str = "sweep") -> int | None:
    """None when at least ``MIN_FINISHED`` trials finished their budget (use their best values);
    otherwise the last epoch every non-failed trial reached (ASHA's first rung at least), so that
    the trials ASHA culled count too. Raises NotApplicable when no trial has an epoch."""
    trials = sweep.stage_trials(stage)
    if int(finished(trials).sum()) >= MIN_FINISHED:
        return None
    reached = pd.to_numeric(trials.loc[trials["status"] != "failed", "epochs_completed"], errors="coerce")
    reached = reached[reached > 0]
    if not len(reached):
        raise NotApplicable("no trial has completed an epoch yet")
    return int(reached.min())


def rebuild_study(sweep: Sweep, metric: str | None = None, stage: str = "sweep", at_epoch: int | None = None):
    """(an in-memory ``optuna.Study`` holding one COMPLETE trial per usable trial, the value label,
    excluded parameters with reasons). Usable with any ``optuna.visualization`` function too."""
    import optuna

    metric = metric or sweep.metric
    trials, value, label = _targets(sweep, metric, stage, at_epoch)
    if len(trials) < MIN_TRIALS:
        raise NotApplicable(f"{len(trials)} trial(s) with {label}; importance needs at least {MIN_TRIALS}")
    columns = varying_columns(trials)
    if not columns:
        raise NotApplicable(f"no parameter varies across the {len(trials)} trials with {label}")
    distributions, converters, excluded = {}, {}, {}
    declared = sweep.declared_log_scale()
    for column in columns:
        share = float(trials[column].notna().mean())
        if share < 1.0:
            excluded[param_name(column)] = f"conditional: present in {share:.0%} of the trials"
        distributions[param_name(column)], converters[column] = _distribution(column, trials[column], declared)
    with _quiet(optuna):
        study = optuna.create_study(direction="maximize" if sweep.higher_is_better(metric) else "minimize",
                                    study_name=f"{sweep.name}:{label}")
    for index, row in trials[columns].iterrows():
        params = {param_name(c): converters[c](v) for c, v in row.items() if not pd.isna(v)}
        study.add_trial(optuna.trial.create_trial(
            value=float(value[index]), params=params, distributions={p: distributions[p] for p in params},
            user_attrs={"trial_id": str(trials.at[index, "trial_id"])}))
    return study, label, excluded


def param_importance(sweep: Sweep, metric: str | None = None, evaluator: str = "fanova",
                     fallback: str = "mean_decrease_impurity", stage: str = "sweep", at_epoch: int | None = None,
                     seed: int = 0) -> Importance:
    """Normalised importances of the parameters present in every usable trial."""
    import optuna

    for name in (evaluator, fallback):
        if name not in EVALUATORS:
            raise ValueError(f"unknown importance evaluator {name!r}; valid: {list(EVALUATORS)}")
    study, label, excluded = rebuild_study(sweep, metric, stage, at_epoch)
    always = sorted(set(study.trials[0].params).intersection(*(t.params for t in study.trials)))
    if not always:
        raise NotApplicable(f"no parameter is present in every trial; conditional ones: {sorted(excluded)}")
    errors: dict[str, str] = {}
    for name in dict.fromkeys([evaluator, fallback]):
        try:
            with _quiet(optuna):
                scores = optuna.importance.get_param_importances(study, evaluator=_evaluator(name, seed), params=always)
        except (ValueError, RuntimeError, ZeroDivisionError, IndexError) as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
            continue
        table = pd.DataFrame({"param": list(scores), "importance": [float(v) for v in scores.values()]})
        if table["importance"].isna().all() or math.isclose(float(table["importance"].sum()), 0.0):
            errors[name] = "all importances zero or undefined (the value does not vary)"
            continue
        table = table.sort_values("importance", ascending=False, ignore_index=True)
        return Importance(table, name, len(study.trials), label, excluded, errors)
    raise NotApplicable(f"importance failed with every evaluator: {errors}")


class _quiet:
    """Silence Optuna's experimental-feature and trial-added logging while evaluating."""

    def __init__(self, optuna_module):
        self.logging = optuna_module.logging

    def __enter__(self):
        self.level = self.logging.get_verbosity()
        self.logging.set_verbosity(self.logging.ERROR)

    def __exit__(self, *exc):
        self.logging.set_verbosity(self.level)
