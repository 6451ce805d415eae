"""Learning signals (xbm/evaluate/signals.py) and the marks status and the report put on unhealthy trials."""
import math

import pandas as pd

from tune.results.status import health
from xbm.evaluate.signals import below_raw, collapse_message, collapse_warning, collapsed, trial_flags


def test_an_epoch_collapsed_only_when_no_positive_pair_reached_the_loss():
    """Bug caught: a mean of 0.4 positive pairs per iteration (alive) or a missing count read as a collapse."""
    assert collapsed({"loss_pos_pairs": 0.0}) and collapsed({"loss_pos_pairs": 0})
    assert not collapsed({"loss_pos_pairs": 0.4}) and not collapsed({}) and not collapsed({"loss_pos_pairs": None})
    line = collapse_warning({"epoch": 3, "loss": 0.0, "loss_pos_pairs": 0.0}, "trial abc")
    assert line.startswith("warning: trial abc: epoch 3 collapsed: the loss saw no positive pair (loss 0)")
    assert collapse_warning({"epoch": 3, "loss_pos_pairs": 2.0}) is None


def test_the_collapse_message_for_a_log_record_leaves_the_level_to_the_record():
    """Bug caught (issue 55): the sink's logged warning reading ``warning: warning: ...`` on the CLI (whose formatter
    names the level) or ``WARNING ... warning: ...`` in a notebook's logging format."""
    metrics = {"epoch": 3, "loss": 0.0, "loss_pos_pairs": 0.0}
    assert collapse_message(metrics, "trial abc").startswith("trial abc: epoch 3 collapsed")
    assert collapse_warning(metrics, "trial abc") == "warning: " + collapse_message(metrics, "trial abc")
    assert collapse_message({"epoch": 3, "loss_pos_pairs": 2.0}) is None


def test_below_raw_compares_finite_values_only():
    assert below_raw(0.30, 0.435) and not below_raw(0.5, 0.435) and not below_raw(0.435, 0.435)
    assert not below_raw(math.nan, 0.4) and not below_raw(0.3, None) and not below_raw(None, 0.4)


def test_trial_flags_name_both_problems_with_their_numbers():
    assert trial_flags(0, 0.8, 0.43) == ""
    assert trial_flags(1, 0.8, 0.43) == "collapsed 1 epoch"
    assert trial_flags(3, 0.301, 0.435) == "collapsed 3 epochs; below raw pixels (0.301 < 0.435)"
    assert trial_flags(None, 0.3, math.nan) == ""


def test_status_marks_unhealthy_trials_and_leaves_healthy_ones_blank():
    """Bug caught: status showing a collapsed or below-raw trial like any other (issue 8)."""
    trials = pd.DataFrame({"trial_id": ["a", "b", "c"], "collapsed_epochs": [0, 2, 0],
                           "best_recall_at_1": [0.8, 0.7, 0.3], "reference_raw_recall_at_1": [0.43, 0.43, 0.43]})
    assert health(trials).tolist() == ["", "collapsed 2 epochs", "below raw pixels (0.300 < 0.430)"]
    assert health(pd.DataFrame({"trial_id": ["a"], "best_recall_at_1": [0.1]})).tolist() == [""]  # old sweeps
