"""What population-based training did to its trials (``--scheduler pbt``): the values of the mutable params
epoch by epoch (every epoch row carries the trial's config at that epoch) and the exploits recorded in
trials.parquet (``exploits``: ``"<donor>@<donor's epoch>"`` entries)."""
from __future__ import annotations

import pandas as pd

from analysis.columns import CONFIG_PREFIX, param_name
from analysis.errors import NotApplicable
from analysis.loader import Sweep


def schedules(sweep: Sweep, stage: str = "sweep") -> pd.DataFrame:
    """Long table ``trial_id, variant, epoch, param, value``: each config column that changes within some
    trial (PBT's explore), for every trial. NotApplicable when no trial's config changed."""
    epochs = sweep.stage_epochs(stage)
    columns = [c for c in epochs.columns if c.startswith(CONFIG_PREFIX) and pd.api.types.is_numeric_dtype(epochs[c])
               and not pd.api.types.is_bool_dtype(epochs[c])]
    changing = [c for c in columns if (epochs.groupby("trial_id")[c].nunique(dropna=True) > 1).any()]
    if not changing:
        raise NotApplicable("no trial's config changed during its run (not a PBT sweep)")
    frame = epochs[["trial_id", "variant", "epoch", *changing]].melt(
        id_vars=["trial_id", "variant", "epoch"], var_name="param", value_name="value")
    frame["param"] = frame["param"].map(param_name)
    return frame.sort_values(["param", "trial_id", "epoch"], ignore_index=True)


def exploits(sweep: Sweep, stage: str = "sweep") -> pd.DataFrame:
    """One row per exploit: ``trial_id`` (who copied), ``donor``, ``epoch`` (the donor's checkpoint epoch)."""
    trials = sweep.stage_trials(stage)
    rows = []
    if "exploits" in trials.columns:
        for trial_id, text in zip(trials["trial_id"], trials["exploits"]):
            for entry in str(text).split("; ") if isinstance(text, str) and text else ():
                donor, _, epoch = entry.rpartition("@")
                rows.append({"trial_id": trial_id, "donor": donor, "epoch": int(epoch)})
    return pd.DataFrame(rows, columns=["trial_id", "donor", "epoch"])
