"""Where a sweep's time went (analysis.costs), by hand."""
import pandas as pd

from analysis.costs import time_breakdown, time_line


def test_the_time_line_sums_over_trials_and_keeps_data_wait_inside_training():
    """Bugs caught: fractions averaged per trial instead of pooled (a 10 s stopped trial weighing as much as
    a 1,000 s finished one), data wait added on top of training (shares over 100%), or trials without the
    columns (older sweeps, a trial that never reported) counted as zero seconds of training."""
    trials = pd.DataFrame({"wall_time_s": [100.0, 300.0, 50.0], "train_s": [60.0, 240.0, None],
                           "data_wait_s": [4.0, 8.0, None], "eval_s": [20.0, 30.0, None],
                           "checkpoint_s": [5.0, 10.0, None], "setup_s": [10.0, 10.0, None]})
    shares = time_breakdown(trials)
    assert shares["training"] == 300 / 400 and shares["data wait"] == 12 / 400
    assert shares["evaluation"] == 50 / 400 and shares["checkpoints"] == 15 / 400 and shares["set-up"] == 20 / 400
    assert abs(shares["other"] - 15 / 400) < 1e-12
    assert time_line(trials) == ("time: training 75% (data wait 3%), evaluation 12%, checkpoints 4%, "
                                 "set-up 5%, other 4%")
    assert time_line(trials.drop(columns=["train_s"])) is None
    assert time_line(pd.DataFrame()) is None
