"""xbm-tune report: the report's retrieval examples embed the best trial's test queries (the torch side that
analysis leaves to its caller)."""
from __future__ import annotations

import io
import sys

import pytest
import torch

from analysis import load
from analysis.report import write_report
from analysis.retrieval import best_trial_grid, grid_size
from tests.analysis.conftest import config, epoch_rows, trial_row, write_sweep
from tune.commands.report import trial_neighbours


@pytest.mark.cuda(optional=True)   # on the GPU where there is one (scripts/gpu_check.sh runs it)
@pytest.mark.usefixtures("cuda_run_settings_restored")   # the CUDA runtime sets TF32 and cuDNN benchmark
def test_report_shows_the_best_trials_retrievals_and_omits_them_without_weights(tmp_path):
    """Bug caught: the figure drawn from another trial than the best one with weights, or the report failing
    (instead of saying why) when no trial kept weights."""
    from tests.xbm.embedder_fixture import omniglot_mlp_trainer

    b = {"write_sweep": write_sweep, "config": config, "epoch_rows": epoch_rows, "trial_row": trial_row}
    trainer = omniglot_mlp_trainer(tmp_path / "data")
    trials, epochs = [], []
    for trial_id, best in (("low", 0.4), ("high", 0.6)):
        cfg = b["config"]("xbn", 0.5, 0)
        rows = b["epoch_rows"](trial_id, cfg, best, 4)
        weights = tmp_path / f"{trial_id}.pt"
        torch.manual_seed(len(trial_id))
        state = {k: torch.randn_like(v) if v.is_floating_point() else v for k, v in trainer.model.state_dict().items()}
        torch.save({"model": state, "config": trainer.cfg.to_dict(), "epoch": 4, "value": best}, weights)
        trials.append({**b["trial_row"](trial_id, cfg, rows, "completed"), "best_weights": str(weights)})
        epochs += rows
    folder = b["write_sweep"](tmp_path / "sweep", trials, epochs)
    grid = best_trial_grid(load(folder), trial_neighbours)
    assert grid.title.startswith("trial high") and grid_size(grid) == (8, 6)
    assert "## Retrieval examples" in (text := write_report(folder, neighbours=trial_neighbours).read_text())
    assert "figures/retrieval_examples.png" in text and (folder / "figures" / "retrieval_examples.png").exists()
    for row in trials:
        row["best_weights"] = None
    bare = b["write_sweep"](tmp_path / "bare", trials, epochs)
    assert "_Omitted: no trial kept best weights._" in write_report(bare, neighbours=trial_neighbours).read_text()


def test_without_a_neighbours_function_the_report_says_who_draws_the_examples(tmp_path):
    """Bug caught: analysis importing torch to embed the queries itself, or its report failing without them."""
    b = {"write_sweep": write_sweep, "config": config, "epoch_rows": epoch_rows, "trial_row": trial_row}
    cfg = b["config"]("xbn", 0.5, 0)
    rows = b["epoch_rows"]("only", cfg, 0.5, 2)
    folder = b["write_sweep"](tmp_path / "sweep", [b["trial_row"]("only", cfg, rows, "completed")], rows)
    assert "`xbm-tune report` draws them" in write_report(folder).read_text()


class Terminal(io.StringIO):
    """A stderr that says it is a terminal (tqdm draws only there)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("flags, terminal, drawn", [([], True, True), (["--no-progress"], True, False),
                                                    ([], False, False)])
def test_the_reports_steps_get_a_bar_only_on_a_terminal_without_no_progress(tmp_path, monkeypatch, capsys, flags,
                                                                            terminal, drawn):
    """Bugs caught (issue 55): a long report (its retrieval examples embed test queries) silent until it ends, its
    bar drawn into a log file or a pipe, or despite ``--no-progress``; or steps left unnamed. The delay is 0 here, so that the small sweep's quick report draws."""
    import xbm.runtime.progress
    from analysis.report import LOADING, REPORT_SECTIONS, STEPS, WRITING
    from tune.cli import main

    cfg = config("xbn", 0.5, 0)
    rows = epoch_rows("only", cfg, 0.5, 2)
    folder = write_sweep(tmp_path / "sweep", [trial_row("only", cfg, rows, "completed")], rows)
    monkeypatch.setattr(xbm.runtime.progress, "DELAY_S", 0.0)
    stream = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    assert main(["report", str(folder), *flags]) == 0
    assert capsys.readouterr().out == f"report: {folder / 'report.md'}\n"
    err = stream.getvalue()
    named = [name in err for name in (LOADING, REPORT_SECTIONS[0][0], REPORT_SECTIONS[-1][0], WRITING, f"/{STEPS} ")]
    assert named == [drawn] * 5, err   # each step's name is drawn as it begins (set_postfix_str refreshes)


def test_write_report_announces_each_step_once_in_order(tmp_path):
    """Bug caught: a bar whose total (``STEPS``) disagrees with the steps announced, so it stops short or
    overflows."""
    from analysis.report import LOADING, REPORT_SECTIONS, STEPS, WRITING

    cfg = config("xbn", 0.5, 0)
    rows = epoch_rows("only", cfg, 0.5, 2)
    folder = write_sweep(tmp_path / "sweep", [trial_row("only", cfg, rows, "completed")], rows)
    steps = []
    write_report(folder, on_step=steps.append)
    assert steps == [LOADING, *(title for title, _ in REPORT_SECTIONS), WRITING] and len(steps) == STEPS
