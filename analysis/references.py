"""Reference values from the seed papers: every cell of the tables that ``search_spaces/<name>.yaml`` reproduce
(``TABLES``, keyed by the space's name), and the points drawn beside a sweep's one-parameter effects
(``REFERENCES``, built from those cells where a table's rows differ in one swept parameter).

The papers ran other data sets, backbones or budgets than a sweep may (CIFAR-100 in the thesis, GoogLeNet in the
XBM paper), so the points are shown on their own axis and labelled as reference values, never mixed into the
sweep's numbers: the shape of the curve is what compares, not the level. Values are percentages as printed;
``note`` records where the papers disagree with each other or with themselves (each checked in the texts of
/work/shared/papers: thesis seed 000, AXBN paper seed 001, XBM paper seed 002).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pandas as pd

from analysis.columns import config_column
from analysis.errors import NotApplicable
from analysis.loader import Sweep
from analysis.values import metric_values

AXBN_LOST_CELL = ("the text of AXBN's Table 1 lost this cell; read from its Table 2, the same setting (batch 64, "
                  "memory 50%), whose Recall@10 cells equal Table 1's")
THESIS_QUOTES_33_45 = "the thesis (§5.4.1) quotes this value as 33.45; AXBN's Table 1 reads 36.45 ± 0.06"
THESIS_24_50_OR_26_50 = "24.50 in thesis Tables 5.1, 5.4 and 7.1; Table 5.2 prints 26.50 (its Recall@10, 43.06, agrees)"
THESIS_LAMBDA_FIXED = ("which value the other lambda held is not stated; at the stated defaults (lambda_mu 0.5, "
                       "lambda_sigma 1) thesis Table 5.13 reads 39.69 on CIFAR-100, not this row's 85.0 at 1.0")
XBM_TABLE2_DIFFERS = ("XBM paper Table 2 gives {} for the contrastive loss at batch 64 ({}); Table 1's memory ratio "
                      "is not stated")


@dataclass(frozen=True)
class PaperValue:
    """One cell of a paper's table: ``value`` (in ``unit``, as printed) of ``metric`` (a Parquet metric column where
    one exists: ``recall_at_1``, ...) in ``row`` on ``dataset``; ``setting``: the row as config values of the
    table's space (what a trial must hold to be that row); ``note``: a known discrepancy, else empty."""

    table: str
    dataset: str
    row: str
    metric: str
    value: float
    setting: tuple[tuple[str, Any], ...] = ()
    note: str = ""
    unit: str = "%"


def _cells(table: str, dataset: str, metrics: Sequence[str], rows: Sequence[tuple[str, Mapping[str, Any], tuple]],
           notes: Mapping[tuple[str, str], str] | None = None, unit: str = "%") -> tuple[PaperValue, ...]:
    """One table's block: ``rows`` of (row label, setting, values in ``metrics`` order; None: not recorded)."""
    notes = notes or {}
    return tuple(PaperValue(table, dataset, row, metric, value, tuple(setting.items()), notes.get((row, metric), ""),
                            unit)
                 for row, setting, values in rows for metric, value in zip(metrics, values, strict=True)
                 if value is not None)


R1_R10 = ("recall_at_1", "recall_at_10")
NO_XBM = {"memory.enabled": False, "normaliser.kind": "none"}
PLAIN_XBM = {"memory.enabled": True, "normaliser.kind": "none"}


def _axbn_table1(dataset: str, values: Mapping[str, tuple], notes=None) -> tuple[PaperValue, ...]:
    """AXBN paper Table 1 (batch 64; memory 50%, DeepFashion2 100%; mean of 3 runs)."""
    settings = {"No-XBM": NO_XBM, "XBM": PLAIN_XBM, "XBN": {"memory.enabled": True, "normaliser.kind": "xbn"},
                "AXBN": {"memory.enabled": True, "normaliser.kind": "axbn"}}
    return _cells("AXBN paper Table 1", dataset, R1_R10, [(row, settings[row], values[row]) for row in settings],
                  notes)


def _thesis_table5_6(dataset: str, xbm: tuple, xbn: tuple, delayed: float) -> tuple[PaperValue, ...]:
    """Thesis Table 5.6: XBM, XBN and XBN with a 15-epoch delay (Recall@10 not recorded for the delay)."""
    return _cells("thesis Table 5.6", dataset, R1_R10, [
        ("XBM", PLAIN_XBM, xbm), ("XBN", {"normaliser.kind": "xbn", "normaliser.delay_epochs": 0}, xbn),
        ("XBN (15 epoch delay)", {"normaliser.kind": "xbn", "normaliser.delay_epochs": 15}, (delayed, None))])


def _lambda_row(name: str, values: tuple) -> list:
    return [(f"{name} = {x}", {f"normaliser.{name}": x}, (v,)) for x, v in zip((0.0, 0.2, 0.4, 0.6, 0.8, 1.0), values)]


def _xbm_table1(dataset: str, metrics: tuple[str, ...], values: Mapping[str, tuple],
                notes=None) -> tuple[PaperValue, ...]:
    """XBM paper Table 1: each loss without and with the memory ('w/ M')."""
    losses = {"Contrastive": "contrastive", "Triplet": "triplet", "MS": "multi_similarity"}
    rows = []
    for label, kind in losses.items():
        rows.append((label, {"loss.kind": kind, "memory.enabled": False}, values[label]))
        rows.append((f"{label} w/ M", {"loss.kind": kind, "memory.enabled": True}, values[f"{label} w/ M"]))
    return _cells("XBM paper Table 1", dataset, metrics, rows, notes)


def _vehicleid(size: str, pairs: Mapping[str, tuple]) -> tuple[PaperValue, ...]:
    return _xbm_table1(f"VehicleID {size}", ("recall_at_1", "recall_at_5"), pairs)


XBM_SOP_KS = ("recall_at_1", "recall_at_10", "recall_at_100", "recall_at_1000")
XBM_INSHOP_KS = ("recall_at_1", "recall_at_10", "recall_at_20", "recall_at_30", "recall_at_40", "recall_at_50")
XBM_TABLE2_ROWS: list[tuple[str, dict[str, Any]]] = [
    ("Cont. bs. 64", {"memory.enabled": False, "batch_size": 64}),
    ("Cont. bs. 256", {"memory.enabled": False, "batch_size": 256}),
    ("Cont. w/ 1% R_M", {"memory.enabled": True, "batch_size": 64, "memory.ratio": 0.01}),
    ("Cont. w/ 100% R_M", {"memory.enabled": True, "batch_size": 64, "memory.ratio": 1.0})]


def _xbm_table2(metric: str, values: tuple, unit: str) -> tuple[PaperValue, ...]:
    """XBM paper Table 2 (contrastive loss on SOP): one column."""
    return _cells("XBM paper Table 2", "SOP", (metric,),
                  [(row, setting, (v,)) for (row, setting), v in zip(XBM_TABLE2_ROWS, values)], unit=unit)


TABLES: dict[str, tuple[PaperValue, ...]] = {
    "axbn_table1_sop": _axbn_table1("SOP", {
        "No-XBM": (75.94, 89.74), "XBM": (76.80, 89.34), "XBN": (80.62, 91.85), "AXBN": (80.73, 91.98)},
        {("No-XBM", "recall_at_1"): AXBN_LOST_CELL, ("XBM", "recall_at_1"): AXBN_LOST_CELL}),
    "axbn_table1_inshop": _axbn_table1("In-Shop", {
        "No-XBM": (88.76, 97.76), "XBM": (86.17, 96.58), "XBN": (91.49, 98.31), "AXBN": (91.51, 98.35)},
        {("No-XBM", "recall_at_1"): AXBN_LOST_CELL, ("XBM", "recall_at_1"): AXBN_LOST_CELL}),
    "axbn_table1_deepfashion2": _axbn_table1("DeepFashion2", {
        "No-XBM": (36.45, 61.44), "XBM": (41.22, 62.24), "XBN": (45.12, 66.32), "AXBN": (45.33, 66.26)},
        {("No-XBM", "recall_at_1"): THESIS_QUOTES_33_45}),
    # the thesis's No-XBM baseline (Table 5.1), which no space of its own runs: any thesis space with
    # --set memory.enabled=false --set normaliser.kind=none
    "thesis_table5_1": (
        _cells("thesis Table 5.1", "In-Shop", R1_R10, [("No-XBM", NO_XBM, (47.67, 76.62))],
               {("No-XBM", "recall_at_1"): "§5.4.1's text gives 47.2 for this 47.67"})
        + _cells("thesis Table 5.1", "SOP", R1_R10, [("No-XBM", NO_XBM, (44.68, 60.83))],
                 {("No-XBM", "recall_at_1"): "§5.4.1's text gives 45.0 for this 44.68"})
        + _cells("thesis Table 5.1", "DeepFashion2", R1_R10, [("No-XBM", NO_XBM, (24.50, 43.06))],
                 {("No-XBM", "recall_at_1"): THESIS_24_50_OR_26_50})),
    "thesis_table5_6_delay": (_thesis_table5_6("In-Shop", (71.68, 91.12), (71.02, 90.95), 71.50)
                              + _thesis_table5_6("SOP", (58.73, 74.11), (58.63, 73.78), 58.90)
                              + _thesis_table5_6("DeepFashion2", (43.63, 62.57), (43.53, 61.33), 50.60)),
    "thesis_table5_14": _cells("thesis Table 5.14", "CIFAR-100", ("recall_at_1",),
                               _lambda_row("lambda_mu", (72.5, 74.9, 84.8, 91.7, 60.4, 63.9))
                               + _lambda_row("lambda_sigma", (73.5, 73.4, 73.2, 73.5, 73.8, 85.0)),
                               {("lambda_sigma = 1.0", "recall_at_1"): THESIS_LAMBDA_FIXED}),
    "thesis_table5_15_margins": tuple(
        cell for dataset, default, adjusted in (("CIFAR-10", (85.69, 96.67), (96.22, 98.49)),
                                                ("CIFAR-100", (39.69, 77.36), (80.07, 92.31)))
        for cell in _cells("thesis Table 5.15", dataset, R1_R10, [
            ("PC-XBN", {"miner.pos_margin": 0.2, "miner.neg_margin": 0.8}, default),
            ("PC-XBN (Adjusted Margin)", {"miner.pos_margin": 0.1, "miner.neg_margin": 2.0}, adjusted)])),
    "xbm_table1": (
        _xbm_table1("SOP", XBM_SOP_KS, {
            "Contrastive": (64.0, 81.4, 92.1, 97.8), "Contrastive w/ M": (77.8, 89.8, 95.4, 98.5),
            "Triplet": (61.6, 80.2, 91.6, 97.7), "Triplet w/ M": (74.2, 87.4, 94.2, 98.0),
            "MS": (69.7, 84.2, 93.1, 97.9), "MS w/ M": (76.2, 89.3, 95.4, 98.6)},
            {("Contrastive", "recall_at_1"): XBM_TABLE2_DIFFERS.format(63.9, "no memory"),
             ("Contrastive w/ M", "recall_at_1"): XBM_TABLE2_DIFFERS.format(77.4, "memory ratio 100%")})
        + _xbm_table1("In-Shop", XBM_INSHOP_KS, {
            "Contrastive": (77.1, 93.0, 95.2, 96.1, 96.8, 97.1),
            "Contrastive w/ M": (89.1, 97.3, 98.1, 98.4, 98.7, 98.8),
            "Triplet": (79.8, 94.8, 96.5, 97.4, 97.8, 98.2), "Triplet w/ M": (82.9, 95.7, 96.9, 97.4, 97.8, 98.0),
            "MS": (85.1, 96.7, 97.8, 98.3, 98.7, 98.8), "MS w/ M": (87.1, 97.1, 98.0, 98.4, 98.7, 98.9)})
        + _vehicleid("small", {"Contrastive": (79.5, 91.6), "Contrastive w/ M": (94.1, 96.2), "Triplet": (86.9, 94.8),
                               "Triplet w/ M": (93.3, 95.8), "MS": (91.0, 96.1), "MS w/ M": (94.1, 96.7)})
        + _vehicleid("medium", {"Contrastive": (76.2, 89.3), "Contrastive w/ M": (93.1, 95.5), "Triplet": (84.8, 93.4),
                                "Triplet w/ M": (92.0, 95.0), "MS": (89.4, 94.8), "MS w/ M": (93.0, 95.8)})
        + _vehicleid("large", {"Contrastive": (70.0, 86.0), "Contrastive w/ M": (92.5, 95.5), "Triplet": (79.7, 91.4),
                               "Triplet w/ M": (91.3, 94.8), "MS": (86.7, 93.8), "MS w/ M": (92.1, 95.6)})),
    "xbm_table2": (_xbm_table2("recall_at_1", (63.9, 71.7, 69.8, 77.4), "%")
                   + _xbm_table2("training_hours", (2.10, 4.32, 2.48, 3.19), "h")
                   # the batch-64 baseline's GPU memory, then each row's extra over it ("+15.7 GB", ...)
                   + _cells("XBM paper Table 2", "SOP", ("gpu_memory_gb",), [(*XBM_TABLE2_ROWS[0], (5.12,))], unit="GB")
                   + _cells("XBM paper Table 2", "SOP", ("extra_gpu_memory_gb",),
                            [(*row, (v,)) for row, v in zip(XBM_TABLE2_ROWS[1:], (15.7, 0.01, 0.20))], unit="GB")),
}


def table_frame(name: str) -> pd.DataFrame:
    """The cells of the table a space reproduces (``name``: the space's name), one row each."""
    cells = TABLES[name]
    return pd.DataFrame({"table": [c.table for c in cells], "dataset": [c.dataset for c in cells],
                         "row": [c.row for c in cells], "metric": [c.metric for c in cells],
                         "value": [c.value for c in cells], "unit": [c.unit for c in cells],
                         "setting": [", ".join(f"{k}={v}" for k, v in c.setting) for c in cells],
                         "note": [c.note for c in cells]})


# the papers' data set names as config values (VehicleID's three test lists by vehicleid_test_size)
DATASET_CONFIG: dict[str, dict[str, Any]] = {
    "SOP": {"dataset": "sop"}, "In-Shop": {"dataset": "inshop"}, "DeepFashion2": {"dataset": "deepfashion2"},
    "CIFAR-10": {"dataset": "cifar10"}, "CIFAR-100": {"dataset": "cifar100"},
    **{f"VehicleID {size}": {"dataset": "vehicleid", "vehicleid_test_size": n}
       for size, n in (("small", 800), ("medium", 1600), ("large", 2400))}}


def paper_comparison(sweep: Sweep, metric: str | None = None, stage: str = "sweep") -> pd.DataFrame:
    """The cells of ``metric`` in the table the sweep's space reproduces, each beside the sweep's trials that ran
    its row (its data set and its ``setting``): how many, and their best ``metric`` x 100 (the paper's unit; best
    by the metric's direction, the sweep's ``--mode`` for its own metric).
    The sweep's values are on its selection split (``val_fraction``: held-out training classes), the paper's on
    the test classes. NotApplicable when the space reproduces no table or the table has no cell of ``metric``."""
    name, metric = sweep.record.space.name, metric or sweep.metric
    if name not in TABLES:
        raise NotApplicable(f"space {name!r} reproduces no paper table (those that do: {', '.join(TABLES)})")
    cells = [c for c in TABLES[name] if c.metric == metric]
    if not cells:
        raise NotApplicable(f"the table of {name} prints no {metric}")
    trials, values = sweep.stage_trials(stage), metric_values(sweep, metric, stage)
    higher = sweep.higher_is_better(metric)  # the sweep's --mode for its own metric
    rows = []
    for c in cells:
        ran = pd.Series(True, index=trials.index)
        for key, value in {**DATASET_CONFIG.get(c.dataset, {}), **dict(c.setting)}.items():
            column = config_column(key)
            ran &= (trials[column] == value).fillna(False) if column in trials.columns else False
        best = values[ran].max() if higher else values[ran].min()
        rows.append({"table": c.table, "dataset": c.dataset, "row": c.row, "paper": c.value,
                     "trials": int(ran.sum()), "sweep best x100": round(100 * best, 2) if ran.any() else None,
                     "note": c.note})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Reference:
    param: str  # config column, e.g. ``config.normaliser.lambda_mu``
    x: tuple[float, ...]
    y: tuple[float, ...]
    unit: str
    dataset: str
    source: str

    @property
    def label(self) -> str:
        return f"reference values on {self.dataset} from the paper ({self.source})"

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame({"param_value": self.x, "reference_value": self.y, "unit": self.unit,
                             "dataset": self.dataset, "source": self.source})


def _overlay(table: str, param: str, dataset: str, source: str, where: Mapping[str, Any] | None = None,
             metric: str = "recall_at_1") -> Reference:
    """The Recall@1 cells of ``table`` on ``dataset`` whose row sets ``param`` (and every ``where`` value),
    ordered by the parameter: one curve of the paper's against that parameter."""
    cells = [c for c in TABLES[table] if c.dataset == dataset and c.metric == metric and param in dict(c.setting)
             and all(dict(c.setting).get(k) == v for k, v in (where or {}).items())]
    cells.sort(key=lambda c: dict(c.setting)[param])
    return Reference(config_column(param), tuple(float(dict(c.setting)[param]) for c in cells),
                     tuple(c.value for c in cells), cells[0].unit, dataset, source)


REFERENCES: dict[str, Reference] = {ref.param: ref for ref in (
    # PC-XBN with one lambda swept from 0 to 1 on CIFAR-100
    _overlay("thesis_table5_14", "normaliser.lambda_mu", "CIFAR-100", "thesis Table 5.14, lambda_mu row"),
    _overlay("thesis_table5_14", "normaliser.lambda_sigma", "CIFAR-100", "thesis Table 5.14, lambda_sigma row"),
    # XBN adapting from epoch 0 and from epoch 15
    _overlay("thesis_table5_6_delay", "normaliser.delay_epochs", "SOP", "thesis Table 5.6, XBN rows"),
    # the contrastive loss at batch 64 with 1% and 100% of the training set in memory (GoogLeNet)
    _overlay("xbm_table2", "memory.ratio", "SOP", "XBM paper Table 2, contrastive loss at batch 64"),
    # the contrastive loss without memory at batch 64 and 256 (GoogLeNet)
    _overlay("xbm_table2", "batch_size", "SOP", "XBM paper Table 2, contrastive loss without memory",
             where={"memory.enabled": False}),
)}


def reference_for(param: str) -> Reference | None:
    """The reference points for a parameter (dotted name or config column), or None."""
    return REFERENCES.get(config_column(param))


# ---- the findings spaces' claims (search_spaces/findings_*.yaml; analysis.findings draws these beside the sweep) ----
FIG6_DERIVED = ("derived, assuming §4.3's gains are in points of Recall@1 (Table 2's gain column is): {}; Fig. 6 "
                "itself is a plot whose values the text does not print")
FINDINGS: dict[str, tuple[PaperValue, ...]] = {
    # XBM paper §4.3 "Mini-batch Size" (Fig. 6) and "Memory Ratio" (Fig. 1 right), Table 2: contrastive loss, SOP
    "findings_batch_size": (
        PaperValue("XBM paper Fig. 6", "SOP", "no memory", "recall_at_1", 46.6,
                   (("memory.enabled", False), ("batch_size", 16)),
                   FIG6_DERIVED.format("Table 2's 71.7 at batch 256 minus §4.3's 25.1-point gain from 16 to 256")),
        PaperValue("XBM paper Fig. 6", "SOP", "no memory", "recall_at_1", 71.7,
                   (("memory.enabled", False), ("batch_size", 256)), "Table 2, 'Cont. bs. 256'"),
        PaperValue("XBM paper Fig. 6", "SOP", "xbm", "recall_at_1", 78.2,
                   (("memory.enabled", True), ("batch_size", 16)),
                   "§4.3 'Memory Ratio' text (71.7 -> 78.2 at batch 16); the memory ratio is not stated"),
        PaperValue("XBM paper Fig. 6", "SOP", "xbm", "recall_at_1", 81.4,
                   (("memory.enabled", True), ("batch_size", 256)),
                   FIG6_DERIVED.format("78.2 at batch 16 plus §4.3's 3.2-point gain from 16 to 256"))),
    "findings_memory_ratio": (
        PaperValue("XBM paper Fig. 1 right", "In-Shop", "xbm, batch 16", "recall_at_1", 52.0,
                   (("memory.ratio", 0.0), ("batch_size", 16)), "§4.3 'Memory Ratio' text: ratio 0 is no memory"),
        PaperValue("XBM paper Fig. 1 right", "In-Shop", "xbm, batch 16", "recall_at_1", 79.4,
                   (("memory.ratio", 0.01), ("batch_size", 16)), "§4.3 'Memory Ratio' text (52.0 -> 79.4)"),
        *(PaperValue("XBM paper Table 2", "SOP", "xbm, batch 64", "recall_at_1", value,
                     (("memory.ratio", ratio), ("batch_size", 64)), "Table 2: batch 64, not Fig. 1's 16")
          for ratio, value in ((0.0, 63.9), (0.01, 69.8), (1.0, 77.4)))),
    # XBM paper "Hard Mining Ability" (end of §3.3, Fig. 4): SOP, R_M = 1, batch 64, GoogLeNet
    "findings_valid_negatives": (
        PaperValue("XBM paper Fig. 4", "SOP", "memory", "valid_neg_memory", 1000.0, (("memory.ratio", 1.0),),
                   "text: 'about 1,000 hard negative pairs per iteration', steadily through training", "pairs"),
        PaperValue("XBM paper Fig. 4", "SOP", "mini-batch", "valid_neg_batch", 10.0, (("batch_size", 64),),
                   "text: 'less than 10 valid pairs' from the mini-batch: an upper bound", "pairs")),
    # the thesis (seed 000) §5.4.1-5.4.2, Figs. 5.1 and 5.4: only what its text states (the figures are plots)
    "findings_drift": (
        PaperValue("thesis Fig. 5.4", "In-Shop, SOP, DeepFashion2", "xbm / no memory", "drift_ratio", 2.0, (),
                   "§5.4.2: 'quite a significant increase (2x) in drift ... particularly in the initial stages'",
                   "x"),),
}

