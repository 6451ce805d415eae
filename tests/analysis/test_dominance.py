"""analysis/dominance.py (analysis.pareto): the non-dominated trials of a several-objective sweep, against a brute-force
non-domination check, and read from a sweep folder whose sweep.json names the objectives."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

import analysis
from analysis.errors import NotApplicable
from analysis.dominance import non_dominated, pareto_front

from .conftest import config, epoch_rows, trial_row, write_sweep


def brute_force_front(points: list[tuple[float, ...]], modes: list[str]) -> set[int]:
    """Index i is on the front unless some j is no worse everywhere and strictly better somewhere."""
    def better_or_equal(a, b, mode):
        return a >= b if mode == "max" else a <= b

    front = set()
    for i, p in enumerate(points):
        dominated = False
        for j, q in enumerate(points):
            if i == j:
                continue
            no_worse = all(better_or_equal(q[k], p[k], modes[k]) for k in range(len(modes)))
            strictly = any(q[k] != p[k] for k in range(len(modes)))
            dominated |= no_worse and strictly
        if not dominated:
            front.add(i)
    return front


@pytest.mark.parametrize("modes", [["max", "min"], ["min", "min"], ["max", "max", "min"]])
@pytest.mark.parametrize("seed", range(5))
def test_non_dominated_matches_a_brute_force_check(modes, seed):
    """Bug caught: a mode's sign flipped (the front of the wrong corner), weak domination counted as
    domination (equal points knocking each other off), or one objective ignored. Values are drawn on a
    coarse grid so that ties and duplicate points occur."""
    rng = np.random.default_rng(seed)
    points = [tuple(float(v) for v in row) for row in rng.integers(0, 5, size=(30, len(modes)))]
    mask = non_dominated(np.array(points), modes)
    assert set(np.flatnonzero(mask)) == brute_force_front(points, modes)


def test_a_hand_made_front_recall_against_gpu_hours():
    """Bug caught: the front read from best_ instead of the values the searcher was told (final_ and the
    trial's gpu_hours), failed or confirm-stage trials on it, or a NaN point dominating others."""
    trials = pd.DataFrame([
        {"trial_id": "cheap", "final_recall_at_1": 0.50, "gpu_hours": 1.0, "best_recall_at_1": 0.50},
        {"trial_id": "good", "final_recall_at_1": 0.70, "gpu_hours": 3.0, "best_recall_at_1": 0.70},
        {"trial_id": "worse", "final_recall_at_1": 0.60, "gpu_hours": 3.5, "best_recall_at_1": 0.99},
        {"trial_id": "twin", "final_recall_at_1": 0.70, "gpu_hours": 3.0, "best_recall_at_1": 0.70},
        {"trial_id": "nan", "final_recall_at_1": float("nan"), "gpu_hours": 0.1, "best_recall_at_1": 0.9},
        {"trial_id": "failed", "final_recall_at_1": 0.99, "gpu_hours": 0.1, "status": "failed"},
        {"trial_id": "confirm", "final_recall_at_1": 0.99, "gpu_hours": 0.1, "stage": "confirm"},
    ])
    trials["status"] = trials.get("status").fillna("completed")
    trials["stage"] = trials.get("stage").fillna("sweep")
    front = pareto_front(trials, ["recall_at_1", "gpu_hours"], ["max", "min"]).front
    assert list(front.trial_id) == ["good", "twin", "cheap"]  # best recall first; equal points both kept


def test_pareto_reads_the_objectives_from_the_sweep_record(tmp_path):
    """Bug caught: analysis.pareto ranking on the first metric only (sweep.json's extra_metrics ignored)."""
    trials, epochs = [], []
    for i, (recall, memory) in enumerate([(0.5, 100), (0.6, 400), (0.55, 500), (0.4, 100)]):
        cfg = config("xbn", 0.1 * (i + 1), 0)
        rows = epoch_rows(f"t{i}", cfg, recall, 2)
        for r in rows:
            r["memory_bytes"] = memory
        epochs += rows
        trials.append({**trial_row(f"t{i}", cfg, rows, "completed"), "final_memory_bytes": memory,
                       "best_memory_bytes": memory})
    folder = write_sweep(tmp_path / "mo", trials, epochs,
                         {"extra_metrics": ["memory_bytes"], "extra_modes": ["min"]})
    sweep = analysis.load(folder)
    finals = {r["trial_id"]: r["final_recall_at_1"] for r in trials}
    expected = brute_force_front([(finals[f"t{i}"], m) for i, m in enumerate([100, 400, 500, 100])], ["max", "min"])
    assert set(analysis.pareto(sweep).trial_id) == {f"t{i}" for i in expected}
    assert sweep.record.metrics == ("recall_at_1", "memory_bytes") and sweep.record.modes == ("max", "min")


def test_an_objective_without_a_column_is_not_applicable():
    with pytest.raises(NotApplicable, match="no column final_memory_bytes"):
        pareto_front(pd.DataFrame({"final_recall_at_1": [0.5]}), ["recall_at_1", "memory_bytes"], ["max", "min"])
