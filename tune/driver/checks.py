"""What a sweep's space and options must give before Ray starts: a valid base config, a metric the trials
report, data sets that open, a grace period within the budget. Each refusal is a ``SweepInputError`` (exit 2)
naming the flag or key and what to do; nothing is written before them (``tune.driver.plan.prepare``)."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from tune.driver.options import SweepOptions
from tune.errors import SweepInputError
from tune.results.trial_config import train_config
from tune.search.spaces.space import SearchSpace
from xbm.data.inputs import PATH_KEYS


def check_sweep_inputs(space: SearchSpace, options: SweepOptions) -> int:
    """Check ``space`` against ``options`` (its base config, ``check_metric``, ``check_data``, the grace
    period); returns the epoch budget, the base config's ``epochs``."""
    max_epochs = train_config(space.base).epochs  # the fixed part alone must be a valid TrainConfig
    check_metric(space, options.metric)
    check_data(_data_variants(space))
    if options.grace_period > max_epochs and options.scheduler != "fifo":
        raise SweepInputError(f"--grace-period must be <= the epoch budget ({max_epochs}), but got "
                              f"{options.grace_period}; lower it or raise --max-epochs")
    return max_epochs


def check_metric(space: SearchSpace, metric: str) -> None:
    """A ``recall_at_K`` metric (or ``test_recall_at_K``) must be one the trials report: K in the data set's
    K set, or in ``eval_ks``, for every data set and ``eval_ks`` the space can give; ``nmi`` needs ``eval_nmi``;
    ``val_oneshot_error`` a validation split (``val_fraction`` > 0) with one-shot episodes (``oneshot_episodes``).
    Otherwise every epoch would report it as NaN and the scheduler would rank trials on nothing."""
    import re

    from xbm.data import recall_ks

    def values(key):
        if key in space.params:
            return space.params[key].possible_values() or [space.base.get(key)]
        return [space.base.get(key)]
    if metric == "nmi" and False in values("eval_nmi"):
        raise SweepInputError("--metric nmi is never reported where eval_nmi is false: set eval_nmi=true (the "
                              "default) or choose another --metric")
    if metric == "val_oneshot_error":   # the validation split's one-shot episodes: both must exist
        if 0 in values("oneshot_episodes") or any(not v for v in values("val_fraction")):
            raise SweepInputError("--metric val_oneshot_error is never reported where val_fraction is 0 or "
                                  "oneshot_episodes is 0 (it scores one-shot episodes on the validation classes): "
                                  "set val_fraction > 0 (and val_by=superclass to hold out whole super-classes)")
    match = re.fullmatch(r"(?:test_)?recall_at_(\d+)", metric)
    if match is None:
        return
    k = int(match.group(1))
    for dataset in values("dataset"):
        for eval_ks in values("eval_ks"):
            chosen = {key: v for key, v in (("dataset", dataset), ("eval_ks", eval_ks)) if v is not None}
            cfg = train_config({**space.base, **chosen})
            ks = cfg.recall_ks(recall_ks(cfg.dataset))
            if k not in ks:
                raise SweepInputError(
                    f"--metric {metric} is never reported: dataset {cfg.dataset!r} with eval_ks={cfg.eval_ks!r} "
                    f"reports recall_at_K for K in {list(ks)}; choose one of them, or add K with --set eval_ks=...")


def check_data(configs: Iterable[Mapping[str, Any]]) -> None:
    """Open each distinct data set (and ``pretrained_path``) the configs read, once, on this machine:
    ``xbm.data.checks.check_inputs`` (the data set's own layout check; no image decoded). A missing or wrong
    path raises SweepInputError carrying the data set's layout message (exit 2, before Ray starts)."""
    from xbm.data.checks import check_inputs

    seen = set()
    for config in configs:
        cfg = train_config(config)
        key = (cfg.dataset, cfg.val_fraction, cfg.val_by, cfg.train_on, *(getattr(cfg, k) for k in PATH_KEYS))
        if key in seen:
            continue
        seen.add(key)
        try:
            check_inputs(cfg)
        except (ValueError, FileNotFoundError) as exc:
            raise SweepInputError(str(exc)) from exc


def _data_variants(space: SearchSpace) -> list[dict[str, Any]]:
    """The base config, and one config per value of a swept path key (e.g. a choice of pretrained_path
    files), for ``check_data``. A swept ``dataset`` is checked only in its trials."""
    variants = [dict(space.base)]
    for key in PATH_KEYS:
        values = space.params[key].possible_values() if key in space.params else None
        variants += [{**space.base, key: value} for value in values or ()]
    return variants
