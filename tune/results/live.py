"""What a running trial shows on its actor's stdout, so the Ray dashboard's actor logs tell the sweep.

Each trial logs (INFO, logger ``tune.results.live`` and ``tune.trial.loop``; ``tune.trial.logs.trial_logging`` puts
them on the actor's stdout as the message alone), on the actor that runs it (first or reused):

* a header when it starts: ``[xbm] trial <id> starts (trial 2 on this actor): <name> config {...}``;
* one line per epoch: ``[xbm] trial <id> epoch 3/6 loss=2.301 recall_at_1=0.5421 | sweep best
  recall_at_1=0.6012 (trial <id>, epoch 2)``.

The sweep's best so far lives on the driver, which sees every result. ``SweepBest`` (a Tune callback on
the driver) puts it, when it improves, in Ray's internal key-value store (the GCS table Ray Tune itself
uses to ship trainables to workers: ``ray.experimental.internal_kv``); a trial reads that one key before
printing an epoch (one small GCS read per epoch, no extra process). The value is the best over every
result the driver has processed, combined with the epoch being printed; Tune processes a result (and
its callbacks) before it lets the trial train the next epoch, so nothing older than the trials running
at the same moment is missing. A restored sweep starts from its trials' recorded maxima (Tune keeps
``metric_analysis`` in the experiment state).

The log prefix: Ray names an actor's log lines after ``repr(actor)`` once, when the actor starts, and
after that whenever the actor prints Ray's ``:actor_name:`` marker (``ray_constants.LOG_PREFIX_ACTOR_NAME``,
which Ray's log monitor reads and does not show). A reused actor prints the marker with its new trial
(``announce_actor_name``), so the prefix names the trial it runs now. The dashboard's Actors table
keeps the repr Ray recorded at the start (the first trial of that actor); docs/sweeps.md says so.
"""
from __future__ import annotations

import json
import logging
import math
import sys
from typing import Any, Mapping

from ray.tune import Callback

from tune.results.parquet import finite

#: the internal-KV namespace of the sweeps' best values (key: the experiment name)
KV_NAMESPACE = "xbm-tune-best"
PREFIX = "[xbm]"
#: metrics a trial's epoch line shows besides the sweep's metric (``xbm-tune train``'s line: ``xbm.train_cli.SHOWN``)
TRIAL_LINE_METRICS = ("loss",)
_trials_on_this_actor = 0

log = logging.getLogger(__name__)


def better(a: float, b: float, mode: str) -> bool:
    return a > b if mode == "max" else a < b


class SweepBest(Callback):
    """Driver side: keep the sweep's best ``metric`` and publish it under the experiment's name."""

    def __init__(self, experiment: str, metric: str, mode: str) -> None:
        self.experiment, self.metric, self.mode = experiment, metric, mode
        self.best: dict[str, Any] | None = None
        self._seeded = False

    def setup(self, **info) -> None:
        self.best, self._seeded = None, False

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        if not self._seeded:  # a resumed sweep: its trials' recorded maxima (or minima)
            self._seeded = True
            for old in trials:
                value = old.metric_analysis.get(self.metric, {}).get(self.mode)
                if finite(value):
                    self.offer(float(value), old.trial_id, None)

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        value = result.get(self.metric)
        if finite(value):
            self.offer(float(value), trial.trial_id, result.get("epoch"))

    def offer(self, value: float, trial_id: str, epoch: Any) -> None:
        if self.best is None or better(value, self.best["value"], self.mode):
            self.best = {"value": value, "trial_id": trial_id, "epoch": None if epoch is None else int(epoch)}
            _kv_put(self.experiment, self.best)

    def on_experiment_end(self, trials, **info) -> None:
        from ray.experimental.internal_kv import _internal_kv_del, _internal_kv_initialized

        if _internal_kv_initialized():
            _internal_kv_del(self.experiment, namespace=KV_NAMESPACE)


def _kv_put(experiment: str, best: Mapping[str, Any]) -> None:
    from ray.experimental.internal_kv import _internal_kv_initialized, _internal_kv_put

    if _internal_kv_initialized():
        _internal_kv_put(experiment, json.dumps(best), overwrite=True, namespace=KV_NAMESPACE)


def published_best(experiment: str | None) -> dict[str, Any] | None:
    """Trial side: the best the driver published for ``experiment`` (None before any, or outside Ray)."""
    from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_initialized

    if not experiment or not _internal_kv_initialized():
        return None
    raw = _internal_kv_get(experiment, namespace=KV_NAMESPACE)
    return json.loads(raw) if raw else None


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.4g}"
    return str(value)


def epoch_line(trial_id: str, metrics: Mapping[str, Any], budget: int, metric: str, mode: str,
               best: Mapping[str, Any] | None) -> str:
    """One epoch of one trial, with the sweep's best so far (``best``, or this epoch when it is better)."""
    shown = [f"{name}={_fmt(metrics[name])}" for name in dict.fromkeys((*TRIAL_LINE_METRICS, metric)) if name in metrics]
    own = metrics.get(metric)
    if finite(own) and (best is None or better(float(own), best["value"], mode)):
        best = {"value": float(own), "trial_id": trial_id, "epoch": metrics.get("epoch")}
    if best is None:
        tail = f"sweep best {metric}: none yet"
    else:
        where = f"trial {best['trial_id']}" + (f", epoch {best['epoch']}" if best.get("epoch") is not None else "")
        tail = f"sweep best {metric}={_fmt(best['value'])} ({where})"
    return f"{PREFIX} trial {trial_id} epoch {metrics.get('epoch')}/{budget} {' '.join(shown)} | {tail}"


def header_line(trial_id: str, trial_name: str, config: Mapping[str, Any], number: int) -> str:
    """The first line of a trial on an actor: which trial, its name and config, and how many this actor ran."""
    text = json.dumps({k: v for k, v in sorted(config.items())}, default=str)
    return f"{PREFIX} trial {trial_id} starts (trial {number} on this actor): {trial_name} config {text}"


def log_header(trial_id: str, trial_name: str, config: Mapping[str, Any]) -> None:
    """The trial's :func:`header_line`, logged at INFO."""
    global _trials_on_this_actor
    _trials_on_this_actor += 1  # one actor per process: this counts the trials this actor ran
    log.info("%s", header_line(trial_id, trial_name, config, _trials_on_this_actor))


def announce_actor_name(name: str) -> None:
    """Rename this actor's log prefix (Ray's marker, on both streams: each has its own prefix state). Printed,
    not logged: it is a line of Ray's protocol, which no handler or level may reformat or drop."""
    from ray._private.ray_constants import LOG_PREFIX_ACTOR_NAME

    for stream in (sys.stdout, sys.stderr):
        print(f"{LOG_PREFIX_ACTOR_NAME}{name}", file=stream, flush=True)
