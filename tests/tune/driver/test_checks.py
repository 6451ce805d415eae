"""tune/driver/checks.py: what a space and the options must give before Ray starts, each refusal naming the flag
or key."""
from __future__ import annotations

import pytest


def test_a_recall_metric_outside_the_runs_k_set_is_refused_before_ray_starts():
    """Bug caught: ``--metric recall_at_100`` on a data set whose K set lacks 100 (Omniglot reports 1 and 10)
    accepted: every epoch would report it as NaN and ASHA would cull on nothing. The data set's set, test_
    metrics and an ``eval_ks`` that adds the K (fixed or swept) are accepted."""
    from tune.driver.checks import check_metric
    from tune.errors import SweepInputError
    from tune.search.spaces import load_space

    with pytest.raises(SweepInputError) as err:
        check_metric(load_space("omniglot_small"), "recall_at_100")
    assert ("--metric recall_at_100 is never reported: dataset 'omniglot' with eval_ks='auto' reports recall_at_K "
            "for K in [1, 10]") in str(err.value)
    check_metric(load_space("omniglot_small"), "test_recall_at_10")
    check_metric(load_space("omniglot_small"), "map_at_r")
    check_metric(load_space("omniglot_small", overrides={"eval_ks": "1,100"}), "recall_at_100")
    check_metric(load_space("losses"), "recall_at_1000")   # SOP: 1, 10, 100, 1000
    with pytest.raises(SweepInputError, match="dataset 'sop'"):
        check_metric(load_space("losses"), "recall_at_2")
    check_metric(load_space("omniglot_small"), "nmi")   # eval_nmi defaults to true
    with pytest.raises(SweepInputError, match="--metric nmi is never reported where eval_nmi is false"):
        check_metric(load_space("omniglot_small", overrides={"eval_nmi": False}), "nmi")


def test_val_oneshot_error_needs_a_validation_split_with_episodes():
    """Bug caught: ``--metric val_oneshot_error --mode min`` on a space without validation classes (val_fraction 0,
    the default) or with oneshot_episodes 0 accepted: no epoch would report it and ASHA would cull on nothing."""
    from tune.driver.checks import check_metric
    from tune.errors import SweepInputError
    from tune.search.spaces import load_space

    check_metric(load_space("omniglot_oneshot"), "val_oneshot_error")
    for overrides in ({"val_fraction": 0.0}, {"oneshot_episodes": 0}):
        with pytest.raises(SweepInputError, match="--metric val_oneshot_error is never reported"):
            check_metric(load_space("omniglot_oneshot", overrides=overrides), "val_oneshot_error")
    with pytest.raises(SweepInputError, match="never reported where val_fraction is 0"):
        check_metric(load_space("quickstart", overrides={"val_fraction": 0.0}), "val_oneshot_error")


def test_val_by_superclass_on_a_data_set_without_superclasses_is_refused_before_ray_starts(tmp_path):
    """Bug caught: a sweep with val_by=superclass on a data set without super-classes (digits) started Ray and
    failed in every trial, instead of one message naming the key before anything ran."""
    from tune.driver.checks import check_data
    from tune.errors import SweepInputError

    with pytest.raises(SweepInputError, match="val_by=superclass holds out whole super-classes, but dataset"):
        check_data([{"dataset": "digits", "val_fraction": 0.2, "val_by": "superclass"}])
