"""``xbm-tune status PATH``: a sweep's state as a table, read from its Parquet (works while it runs or
after it crashed: the files are replaced atomically, so they are always whole)."""
from __future__ import annotations

import pandas as pd

from analysis.contract import CONFIG_PREFIX, TRIALS_FILE, SweepRecord
from analysis.costs import time_line
from analysis.location import Folder
from tune.results.parquet import RESULTS, SWEEP_JSON, check_storage
from xbm.evaluate.signals import trial_flags


def load_status(path: str, command: str = "status") -> tuple[SweepRecord, pd.DataFrame]:
    """(sweep.json's record, defaults if missing; trials.parquet as a DataFrame). ValueError if neither, or
    if one is unreadable (naming the file); ``command``: the ``xbm-tune`` command the message names."""
    uri = path.rstrip("/")
    check_storage(uri)
    storage = Folder(f"{uri}/{RESULTS}")
    found = storage.exists(SWEEP_JSON)
    record = SweepRecord.from_dict(storage.read_json(SWEEP_JSON)) if found else SweepRecord()
    table = storage.read_table(TRIALS_FILE)
    if table is None and not found:
        raise ValueError(f"{command} needs a sweep folder (holding {RESULTS}/{TRIALS_FILE}), but {path!r} has "
                         f"neither {TRIALS_FILE} nor {SWEEP_JSON}")
    frame = table.to_pandas(types_mapper=pd.ArrowDtype) if table is not None else pd.DataFrame()
    return record, frame


def status_table(record: SweepRecord, trials: pd.DataFrame, top: int | None = 20) -> str:
    """Counts per status and stage, then the trials sorted best first on the sweep's metric."""
    metric, mode = record.metric, record.mode
    name = record.experiment or "?"
    if trials.empty:
        return f"sweep {name}: no trial has reported yet"
    counts = trials.groupby(["stage", "status"]).size().to_string()
    swept = [CONFIG_PREFIX + p for p in record.swept]
    best = f"best_{metric}"
    columns = ["trial_id", "stage", "status", "epochs_completed", best, "best_epoch", f"final_{metric}",
               *[c for c in swept if c in trials], "stop_reason"]
    shown = trials[[c for c in columns if c in trials]].copy()
    flags = health(trials)
    if flags.str.len().gt(0).any():
        shown.insert(3, "health", flags)
    if best in shown:
        shown = shown.sort_values(best, ascending=(mode == "min"), na_position="last")
    if "stop_reason" in shown:
        shown["stop_reason"] = shown["stop_reason"].astype("string").str.slice(0, 60)
    shown.columns = [c[len(CONFIG_PREFIX):] if c.startswith(CONFIG_PREFIX) else c for c in shown.columns]
    more = ""
    if top is not None and len(shown) > top:
        more = f"\n... {len(shown) - top} more (--all shows every trial)"
        shown = shown.head(top)
    with pd.option_context("display.width", 200, "display.max_columns", 50, "display.float_format", "{:.4g}".format):
        table = shown.to_string(index=False)
    cost = time_line(trials)
    return (f"sweep {name}: {len(trials)} trial(s); metric {metric} ({mode})\n{counts}\n"
            f"{cost + chr(10) if cost else ''}\n{table}{more}")


def health(trials: pd.DataFrame) -> pd.Series:
    """Per trial: "" or what is wrong with it (xbm.evaluate.signals.trial_flags): collapsed epochs, best Recall@1
    below nearest neighbour on raw pixels."""
    def column(name):
        return trials[name] if name in trials else pd.Series([None] * len(trials), index=trials.index)
    return pd.Series([trial_flags(c, b, r) for c, b, r in zip(column("collapsed_epochs"), column("best_recall_at_1"),
                                                             column("reference_raw_recall_at_1"))],
                     index=trials.index, dtype="string")
