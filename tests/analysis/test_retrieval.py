"""analysis/retrieval.py and the report's retrieval examples: compute first (the grid), draw second."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from analysis import load, plots
from analysis.report import write_report
from analysis.retrieval import best_trial_grid, grid_from_neighbours, grid_size


def test_grid_marks_a_neighbour_right_when_it_has_the_querys_label():
    """Bug caught: correctness compared with the wrong query's label, or unknown labels counted as wrong."""
    image = np.zeros((4, 4), np.uint8)
    grid = grid_from_neighbours([image, image], ["a", "b"], ["q0", "q1"], [[image, image], [image, image]],
                                [["a", "b"], ["a", None]], [["n0", "n1"], ["n2", "n3"]], [[0.9, 0.5], [0.8, 0.1]])
    assert [[t.correct for t in n] for _, n in grid.rows] == [[True, False], [False, None]]
    assert grid.rows[0][1][0].caption == "n0\n0.900" and grid_size(grid) == (2, 3)
    fig = plots.plot_retrieval_grid(grid)
    assert plots.png_bytes(fig, dpi=20)[:4] == b"\x89PNG"


@pytest.mark.cuda(optional=True)   # on the GPU where there is one (scripts/gpu_check.sh runs it)
@pytest.mark.usefixtures("cuda_run_settings_restored")   # the CUDA runtime sets TF32 and cuDNN benchmark
def test_report_shows_the_best_trials_retrievals_and_omits_them_without_weights(build_sweep, tmp_path):
    """Bug caught: the figure drawn from another trial than the best one with weights, or the report failing
    (instead of saying why) when no trial kept weights."""
    from tests.xbm.embedder_fixture import omniglot_mlp_trainer

    b = build_sweep
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
    grid = best_trial_grid(load(folder))
    assert grid.title.startswith("trial high") and grid_size(grid) == (8, 6)
    assert "## Retrieval examples" in (text := write_report(folder).read_text())
    assert "figures/retrieval_examples.png" in text and (folder / "figures" / "retrieval_examples.png").exists()
    for row in trials:
        row["best_weights"] = None
    bare = b["write_sweep"](tmp_path / "bare", trials, epochs)
    assert "_Omitted: no trial kept best weights._" in write_report(bare).read_text()
