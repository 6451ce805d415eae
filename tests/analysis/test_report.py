"""write_report: report.md and PNGs in the sweep folder; sections that don't apply say why."""
import re
import warnings

import pytest

from analysis import plots
from analysis.report import write_report


@pytest.fixture(autouse=True)
def low_dpi(monkeypatch):
    monkeypatch.setattr(plots, "DPI", 30)  # the figures' content is what is checked, not their resolution

SECTIONS = ["## Leaderboard", "## Recall@K", "## Best per normaliser kind", "## Variant comparison", "## Confirmation",
            "## Parameter importance", "## Learning curves", "## ASHA survival", "## One-parameter effects",
            "## lambda_mu × lambda_sigma", "## Drift and staleness", "## Parallel coordinates"]


def _check_links(path):
    text = path.read_text()
    for link in re.findall(r"\]\((figures/[^)]+\.png)\)", text):
        assert (path.parent / link).read_bytes()[:4] == b"\x89PNG", link
    return text


@pytest.mark.slow
def test_full_report_with_confirm_stage(confirm_sweep):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = write_report(confirm_sweep)
    assert path == confirm_sweep / "report.md"
    text = _check_links(path)
    for section in SECTIONS:
        assert section in text
    head = text.split("## One-parameter effects")[0]
    refit = head.split("## Refit")[1].split("## ")[0]  # this sweep has no refit stage: that section says so
    assert "_Omitted" not in head.replace(refit, "") and "_Omitted: no refit stage" in refit
    assert "failed (" not in text
    confirmation = text.split("## Confirmation")[1].split("## ")[0]
    assert "final test_recall_at_1" in confirmation and "| pcxbn | 3 | 3 | 10, 11, 12 | 0.5867 |" in confirmation
    assert "<null>" not in confirmation.split("Configurations")[0]   # no raw configuration keys in the table
    assert "reference values on CIFAR-100 from the paper" in text
    recall = text.split("## Recall@K")[1].split("## ")[0]   # the K set the runs reported, best epoch's values
    assert "| rank | trial_id | recall_at_1 | recall_at_10 |" in recall and "| 1 | pcxbn_0.5_2 | 0.7 | 0.9 |" in recall
    assert "_Not swept, so omitted: normaliser.delay_epochs" in text
    for name in ("leaderboard", "variants", "paired_differences", "importance", "learning_curves", "asha_survival",
                 "effect_normaliser_lambda_mu", "effect_normaliser_kalman_r", "effect_memory_ratio", "lambda_heatmap",
                 "drift_staleness", "parallel_coordinates"):
        assert (confirm_sweep / "figures" / f"{name}.png").exists(), name


@pytest.mark.slow
def test_degenerate_sweeps_omit_sections_with_a_reason(crashed_sweep, build_sweep, tmp_path):
    (crashed_sweep / "figures").mkdir(exist_ok=True)
    (crashed_sweep / "figures" / "stale.png").write_bytes(b"\x89PNG from an earlier report")
    path = write_report(f"file://{crashed_sweep}")  # a pyarrow.fs URI works as well as a folder
    assert not (crashed_sweep / "figures" / "stale.png").exists()
    assert path == crashed_sweep / "report.md"
    text = _check_links(path)
    assert "**Read problems" in text and "trials.parquet: missing" in text
    assert "_Omitted: no confirm stage" in text
    assert "value: recall_at_1 at epoch 2" not in text  # 2 trials only: importance needs 3
    assert "_Omitted: 2 trial(s) with recall_at_1 at epoch 2" in text
    assert "failed (" not in text
    b = build_sweep
    cfg = b["config"]("xbn", 0.5, 0)
    rows = b["epoch_rows"]("only", cfg, 0.6, 2)
    single = b["write_sweep"](tmp_path / "single", [b["trial_row"]("only", cfg, rows, "running")], rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = _check_links(write_report(single))
    for section in SECTIONS:
        assert section in text
    assert "_Omitted: no sweep trial has finished its epoch budget with a value of best_recall_at_1" in text
    assert "_Omitted: no numeric parameter is swept" in text or "_Omitted: no parameter varies" in text
    assert "failed (" not in text


def test_report_marks_collapsed_and_below_raw_trials(build_sweep, tmp_path):
    """Bug caught: a report ranking a collapsed run or one below raw-pixel neighbours like any other
    (issue 8: the shipped Omniglot study was such runs)."""
    b = build_sweep
    trials, epochs = b["finished_rows"]()
    trials[0] = {**trials[0], "collapsed_epochs": 3, "reference_raw_recall_at_1": 0.1}
    trials[1] = {**trials[1], "collapsed_epochs": 0, "reference_raw_recall_at_1": 0.99}
    for row in trials[2:]:
        row.update(collapsed_epochs=0, reference_raw_recall_at_1=0.1)
    text = _check_links(write_report(b["write_sweep"](tmp_path / "health", trials, epochs)))
    assert "**Unhealthy trials (2 of" in text
    assert f"- `{trials[0]['trial_id']}`: collapsed 3 epochs" in text
    assert f"- `{trials[1]['trial_id']}`: below raw pixels (" in text
    assert f"`{trials[2]['trial_id']}`:" not in text


def test_a_two_objective_report_draws_the_front_and_a_single_objective_one_says_why_not(build_sweep, tmp_path):
    """Bug caught: the front computed but never shown, drawn for a one-objective sweep, or listing
    dominated trials."""
    from analysis.dominance import pareto_front

    b = build_sweep
    trials, epochs = b["finished_rows"]()
    for i, row in enumerate(trials):
        row.update(final_memory_bytes=float(100 * (i % 4 + 1)), best_memory_bytes=float(100 * (i % 4 + 1)))
    folder = b["write_sweep"](tmp_path / "mo", trials, epochs, {"extra_metrics": ["memory_bytes"],
                                                                  "extra_modes": ["min"]})
    text = _check_links(write_report(folder))
    import pandas as pd
    front = pareto_front(pd.DataFrame(trials), ["recall_at_1", "memory_bytes"], ["max", "min"]).front
    section = text.split("## Pareto front", 1)[1].split("\n## ", 1)[0]
    assert f"{len(front)} of " in section and "figures/pareto.png" in section
    listed = set(re.findall(r"\|\s*(\S+)\s*\|\s*0\.\d+", section))
    assert listed == set(front.trial_id.astype(str).head(10))
    single = _check_links(write_report(b["write_sweep"](tmp_path / "one", *b["finished_rows"]())))
    assert "## Pareto front\n\n_Omitted: one objective" in single


def test_the_drift_section_lists_the_papers_metrics_at_each_variants_last_epoch(build_sweep, tmp_path):
    """Bug caught: the papers' metrics (nmi, superclass_top_k, drift at Δt, valid negatives) reported by the
    trials but shown nowhere in the report, or a null drift at Δt (before Δt iterations) taken as the last value."""
    from analysis import load
    from analysis.report import _Report

    cfg = build_sweep["config"]("xbn", 0.5, 1)
    rows = build_sweep["epoch_rows"]("t0", cfg, 0.6, 3)
    for row in rows:
        row.update(nmi=0.1 * row["epoch"], drift_10_mean=None if row["epoch"] < 3 else 0.25,
                   drift_1000_mean=None, valid_neg_memory=100.0 * row["epoch"])
    trials = [build_sweep["trial_row"]("t0", cfg, rows, "completed")]
    folder = build_sweep["write_sweep"](tmp_path / "paper", trials, rows)
    text = "\n".join(_Report(load(folder), "recall_at_1").drift())
    paper = text.split("The papers' metrics")[1]
    assert "| xbn | 3 | nmi | 0.3 |" in paper and "| xbn | 3 | drift_10_mean | 0.25 |" in paper
    assert "| xbn | 3 | valid_neg_memory | 300 |" in paper and "drift_1000_mean" not in paper


def test_the_paired_differences_show_holm_s_adjusted_p_values_beside_the_raw_ones(finished_sweep, tmp_path):
    """Bug caught: ``p_holm`` computed by ``paired_differences`` but dropped from the report's table (or shown
    without saying what it adjusts for), so a reader of report.md sees only raw pairwise p-values."""
    import shutil

    from analysis import load
    from analysis.report import _Report

    folder = shutil.copytree(finished_sweep, tmp_path / "sweep")   # the report writes figures into the sweep
    text = "\n".join(_Report(load(folder), "recall_at_1").variants())
    paired = text.split("### Paired differences")[1]
    assert "| p_value | p_holm | matched_on |" in paired and "Holm's step-down procedure" in paired
