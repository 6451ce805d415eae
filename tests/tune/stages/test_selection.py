"""tune/stages/selection.py: the top configurations of a sweep, on hand-written rows."""
from __future__ import annotations

from tests.tune.stages.sweep_rows import ROWS
from tune.stages.selection import select_top


def test_select_top_ranks_completed_first_and_counts_a_config_once():
    chosen = select_top(ROWS, "recall_at_1", "max", top=3)
    assert [c.trial_id for c in chosen] == ["b", "c", "a"]
    assert [c.rank for c in chosen] == [1, 2, 3] and chosen[0].duplicates == 2
    assert chosen[0].config["normaliser.lambda_mu"] == 0.3 and "seed" not in chosen[0].config
    assert "normaliser.lambda_mu" not in chosen[1].config  # absent (null) params stay absent
    # the early-stopped trial comes after every completed one, whatever its value
    assert [c.trial_id for c in select_top(ROWS, "recall_at_1", "max", top=10)] == ["b", "c", "a", "early"]
    assert [c.trial_id for c in select_top(ROWS, "recall_at_1", "min", top=2)] == ["a", "c"]
