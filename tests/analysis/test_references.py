"""The seeds' reference values (analysis/references.py): every cell of the tables the table spaces reproduce, their
known discrepancies, and the one-parameter overlays built from them. Values checked against the papers' texts."""
from pathlib import Path

import pandas as pd
import pytest

from analysis import NotApplicable, load
from analysis.references import REFERENCES, TABLES, paper_comparison, reference_for, table_frame
from analysis.report import _Report

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"


def cell(table, dataset, row, metric="recall_at_1"):
    (found,) = [c for c in TABLES[table] if (c.dataset, c.row, c.metric) == (dataset, row, metric)]
    return found


def test_lambda_mu_row_of_table_5_14():
    """Bug caught: the lambda_mu overlay losing its row's values, or a parameter without a table row given one."""
    ref = reference_for("normaliser.lambda_mu")
    assert ref is reference_for("config.normaliser.lambda_mu") is REFERENCES["config.normaliser.lambda_mu"]
    frame = ref.frame()
    assert list(frame["param_value"]) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert list(frame["reference_value"]) == [72.5, 74.9, 84.8, 91.7, 60.4, 63.9]
    assert set(frame["dataset"]) == {"CIFAR-100"}
    assert ref.label.startswith("reference values on CIFAR-100 from the paper")
    assert reference_for("normaliser.kalman_r") is None


def test_every_table_space_has_its_tables_cells():
    """Bug caught: a table space shipped without the paper's values the report draws beside it, or values keyed by
    a name no space has (the report would never find them)."""
    prefixes = ("axbn_table", "thesis_table", "xbm_table")
    table_spaces = {p.stem for p in SPACES.glob("*.yaml") if p.stem.startswith(prefixes)}
    assert table_spaces == {"axbn_table1_sop", "axbn_table1_inshop", "axbn_table1_deepfashion2",
                            "thesis_table5_6_delay", "thesis_table5_14", "thesis_table5_15_margins", "xbm_table1",
                            "xbm_table2"}
    assert set(TABLES) == table_spaces | {"thesis_table5_1"}   # the thesis's No-XBM baseline has no space
    for name in TABLES:
        frame = table_frame(name)
        assert len(frame) == len(TABLES[name]) > 0 and frame["value"].notna().all()


@pytest.mark.parametrize("table, dataset, rows", [
    ("axbn_table1_sop", "SOP", {"No-XBM": 75.94, "XBM": 76.80, "XBN": 80.62, "AXBN": 80.73}),
    ("axbn_table1_inshop", "In-Shop", {"No-XBM": 88.76, "XBM": 86.17, "XBN": 91.49, "AXBN": 91.51}),
    ("axbn_table1_deepfashion2", "DeepFashion2", {"No-XBM": 36.45, "XBM": 41.22, "XBN": 45.12, "AXBN": 45.33}),
    ("thesis_table5_6_delay", "SOP", {"XBM": 58.73, "XBN": 58.63, "XBN (15 epoch delay)": 58.90}),
    ("thesis_table5_6_delay", "DeepFashion2", {"XBM": 43.63, "XBN": 43.53, "XBN (15 epoch delay)": 50.60}),
    ("thesis_table5_15_margins", "CIFAR-100", {"PC-XBN": 39.69, "PC-XBN (Adjusted Margin)": 80.07}),
    ("thesis_table5_15_margins", "CIFAR-10", {"PC-XBN": 85.69, "PC-XBN (Adjusted Margin)": 96.22}),
    ("xbm_table1", "SOP", {"Contrastive": 64.0, "Contrastive w/ M": 77.8, "MS w/ M": 76.2}),
    ("xbm_table1", "VehicleID large", {"Contrastive": 70.0, "Contrastive w/ M": 92.5, "MS": 86.7}),
    ("xbm_table2", "SOP", {"Cont. bs. 64": 63.9, "Cont. bs. 256": 71.7, "Cont. w/ 1% R_M": 69.8,
                           "Cont. w/ 100% R_M": 77.4}),
])
def test_recall_at_1_rows_as_the_papers_print_them(table, dataset, rows):
    """Bug caught: a row's value mistyped or moved to another row or data set (AXBN Table 1 / 2, thesis Tables 5.6,
    5.15, XBM paper Tables 1 and 2)."""
    assert {row: cell(table, dataset, row).value for row in rows} == rows


def test_rows_say_which_config_they_are():
    """Bug caught: a row whose setting does not name the swept values of its space (the report could not match it)."""
    no_xbm = {"memory.enabled": False, "normaliser.kind": "none"}
    assert dict(cell("axbn_table1_sop", "SOP", "No-XBM").setting) == no_xbm
    assert dict(cell("axbn_table1_sop", "SOP", "AXBN").setting) == {"memory.enabled": True, "normaliser.kind": "axbn"}
    assert dict(cell("axbn_table1_sop", "SOP", "XBM").setting) == {"memory.enabled": True, "normaliser.kind": "none"}
    assert dict(cell("thesis_table5_15_margins", "CIFAR-100", "PC-XBN (Adjusted Margin)").setting) == {
        "miner.pos_margin": 0.1, "miner.neg_margin": 2.0}
    assert dict(cell("thesis_table5_6_delay", "SOP", "XBN (15 epoch delay)").setting)["normaliser.delay_epochs"] == 15
    assert dict(cell("xbm_table1", "In-Shop", "Triplet w/ M", "recall_at_50").setting) == {
        "loss.kind": "triplet", "memory.enabled": True}
    assert cell("xbm_table1", "In-Shop", "Triplet w/ M", "recall_at_50").value == 98.0
    assert not [c for c in TABLES["thesis_table5_6_delay"] if c.row.endswith("delay)") and c.metric == "recall_at_10"]


def test_known_discrepancies_are_noted_where_they_occur():
    """Bug caught: the papers' disagreements silently resolved one way: the thesis's DeepFashion2 No-XBM (24.50 in
    Tables 5.1, 5.4, 7.1; 26.50 in Table 5.2), the thesis quoting AXBN's 36.45 as 33.45, AXBN Table 1's lost SOP and
    In-Shop cells (read from its Table 2), XBM Table 1's 77.8 against Table 2's 77.4, thesis Table 5.14's
    lambda_sigma = 1 against Table 5.13."""
    baseline = cell("thesis_table5_1", "DeepFashion2", "No-XBM")
    assert baseline.value == 24.50 and "26.50" in baseline.note and "5.2" in baseline.note
    axbn = cell("axbn_table1_deepfashion2", "DeepFashion2", "No-XBM")
    assert axbn.value == 36.45 and "33.45" in axbn.note
    assert "Table 2" in cell("axbn_table1_sop", "SOP", "XBM").note
    assert cell("axbn_table1_sop", "SOP", "XBN").note == ""
    assert "77.4" in cell("xbm_table1", "SOP", "Contrastive w/ M").note
    assert "39.69" in cell("thesis_table5_14", "CIFAR-100", "lambda_sigma = 1.0").note
    assert "47.2" in cell("thesis_table5_1", "In-Shop", "No-XBM").note


@pytest.mark.parametrize("param, x, y, dataset", [
    ("normaliser.lambda_sigma", (0.0, 0.2, 0.4, 0.6, 0.8, 1.0), (73.5, 73.4, 73.2, 73.5, 73.8, 85.0), "CIFAR-100"),
    ("normaliser.delay_epochs", (0.0, 15.0), (58.63, 58.90), "SOP"),
    ("memory.ratio", (0.01, 1.0), (69.8, 77.4), "SOP"),
    ("batch_size", (64.0, 256.0), (63.9, 71.7), "SOP"),
])
def test_overlays_come_from_the_tables_rows_that_differ_in_one_parameter(param, x, y, dataset):
    """Bug caught: an overlay mixing rows that differ in more than the drawn parameter (Table 2's memory rows on the
    batch-size curve, the XBM row on the delay curve) or drifting from the table's cells."""
    ref = reference_for(param)
    assert (ref.x, ref.y, ref.dataset) == (x, y, dataset) and ref.unit == "%"


def test_paper_comparison_puts_each_cell_beside_the_trials_that_ran_its_row(build_sweep, tmp_path):
    """Bug caught: a sweep's trials matched to a row of another data set or another setting, or the sweep's
    fractions compared with the paper's percentages."""
    b = build_sweep
    runs = [("mu06_a", "cifar100", 0.6, 1.0, 0.80), ("mu06_b", "cifar100", 0.6, 1.0, 0.85),
            ("mu00", "cifar100", 0.0, 0.2, 0.50), ("toy", "toy", 0.6, 1.0, 0.99)]
    trials, epochs = [], []
    for i, (trial_id, dataset, mu, sigma, best) in enumerate(runs):
        cfg = b["config"]("pcxbn", 0.5, i, {"normaliser.lambda_mu": mu, "normaliser.lambda_sigma": sigma},
                          dataset=dataset)
        rows = b["epoch_rows"](trial_id, cfg, best, 4)
        epochs += rows
        trials.append(b["trial_row"](trial_id, cfg, rows, "completed"))
    space = {"name": "thesis_table5_14", "description": "thesis Table 5.14", "text": "", "params": []}
    sweep = load(b["write_sweep"](tmp_path / "t514", trials, epochs, options={"space": space}))
    frame = paper_comparison(sweep).set_index("row")
    assert len(frame) == 12 and set(frame["table"]) == {"thesis Table 5.14"}
    assert frame.loc["lambda_mu = 0.6", ["paper", "trials", "sweep best x100"]].tolist() == [91.7, 2, 85.0]
    assert frame.loc["lambda_sigma = 1.0", "trials"] == 2 and frame.loc["lambda_mu = 0.0", "trials"] == 1
    assert frame.loc["lambda_mu = 0.2", "trials"] == 0 and pd.isna(frame.loc["lambda_mu = 0.2", "sweep best x100"])
    assert "39.69" in frame.loc["lambda_sigma = 1.0", "note"]
    section = "\n".join(_Report(sweep, "recall_at_1").paper_table())
    assert "`thesis_table5_14` reproduces thesis Table 5.14" in section and "| lambda_mu = 0.6 |" in section
    with pytest.raises(NotApplicable, match="prints no map_at_r"):
        paper_comparison(sweep, "map_at_r")
    other = load(b["write_sweep"](tmp_path / "other", trials, epochs))
    with pytest.raises(NotApplicable, match="reproduces no paper table"):
        paper_comparison(other)


def test_paper_comparison_of_a_min_sweep_takes_each_rows_lowest_trial(build_sweep, tmp_path):
    """Bug caught: the best of the trials that ran a row taken as their largest value whatever the sweep's mode, so
    a sweep with --mode min showed its worst trial beside the paper's cell."""
    b = build_sweep
    trials, epochs = [], []
    for i, (trial_id, value) in enumerate((("mu06_a", 0.80), ("mu06_b", 0.85))):
        cfg = b["config"]("pcxbn", 0.5, i, {"normaliser.lambda_mu": 0.6, "normaliser.lambda_sigma": 1.0},
                          dataset="cifar100")
        rows = b["epoch_rows"](trial_id, cfg, value, 1)  # one epoch: its value is the trial's best either way
        epochs += rows
        trials.append(b["trial_row"](trial_id, cfg, rows, "completed"))
    space = {"name": "thesis_table5_14", "description": "thesis Table 5.14", "text": "", "params": []}
    for mode, best in (("max", 85.0), ("min", 80.0)):
        sweep = load(b["write_sweep"](tmp_path / mode, trials, epochs, options={"space": space, "mode": mode}))
        frame = paper_comparison(sweep).set_index("row")
        assert frame.loc["lambda_mu = 0.6", ["trials", "sweep best x100"]].tolist() == [2, best]
