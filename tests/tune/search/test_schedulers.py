"""Which epochs a scheduler decides at (tune.search.schedulers.decision_epochs): those a trial always evaluates."""
import pytest

from tune.driver.options import SweepOptions
from tune.search.schedulers import build_scheduler, decision_epochs


def _epochs(scheduler, max_epochs=9, **options):
    options.setdefault("stop_collapsed", False)  # the scheduler's own decisions (the guards' below)
    return decision_epochs(build_scheduler(SweepOptions(scheduler=scheduler, **options), max_epochs, {}), max_epochs)


def test_asha_decides_at_its_rungs_fifo_never_and_others_every_epoch():
    """Bug caught: eval_every skipping an ASHA rung (the trial ranked on a NaN, or on a stale value), rungs
    computed from the wrong base (grace period x factor^k), or HyperBand's brackets assumed to be ASHA's;
    with collapse-aware stopping (tune.search.guards) the grace period is decided at too, under FIFO as well."""
    assert _epochs("asha", grace_period=1, reduction_factor=3) == (1, 3, 9)
    assert _epochs("asha", 20, grace_period=2, reduction_factor=2) == (2, 4, 8, 16)
    assert _epochs("asha", 20, grace_period=3, reduction_factor=2, stop_collapsed=False) == (3, 6, 12)
    assert _epochs("fifo", stop_collapsed=False) == ()
    assert _epochs("fifo", grace_period=4, stop_collapsed=True) == (4,)  # the below-raw-pixels check
    assert _epochs("hyperband", 4) == (1, 2, 3, 4)
    # collapse-aware stopping judges raw pixels at max(grace period, 3): that epoch is evaluated too
    assert _epochs("fifo", stop_collapsed=True) == (3,) and _epochs("fifo", 2, stop_collapsed=True) == ()


def test_placed_rungs_stop_a_trial_below_the_cutoff_at_a_rung_and_never_between_rungs():
    """Bug caught: rungs listed with --rungs (or placed by the schedule) ignored for Ray's geometric ones (a trial
    judged at epoch 1 or 3), a trial judged between rungs on a poor epoch, or a stop at a placed rung left
    without its stop reason (the Parquet's stop_reason)."""
    from types import SimpleNamespace

    from tune.search.schedulers import PlacedASHA
    from ray.tune.schedulers import TrialScheduler

    reasons: dict = {}
    options = SweepOptions(rungs="2,4", reduction_factor=2, stop_collapsed=False)
    scheduler = build_scheduler(options, 6, reasons)
    assert isinstance(scheduler, PlacedASHA) and decision_epochs(scheduler, 6) == (2, 4)
    scheduler.set_search_properties("recall_at_1", "max")
    a, b, c = (SimpleNamespace(trial_id=name) for name in "abc")
    for trial in (a, b, c):
        scheduler.on_trial_add(None, trial)

    def report(trial, epoch, value):
        return scheduler.on_trial_result(None, trial, {"epoch": epoch, "recall_at_1": value})

    assert [report(a, e, 0.9) for e in (1, 2, 3)] == [TrialScheduler.CONTINUE] * 3
    assert report(b, 1, 0.01) == TrialScheduler.CONTINUE  # far below a, but epoch 1 is no rung
    assert report(b, 2, 0.5) == TrialScheduler.STOP  # rung 2: below a's 0.9
    assert reasons["b"] == "asha: recall_at_1=0.5 below the rung cutoff at epoch 2"
    assert report(c, 2, 0.95) == TrialScheduler.CONTINUE
    assert report(c, 3, 0.0) == TrialScheduler.CONTINUE  # between rungs: not judged
    assert report(c, 4, 0.8) == TrialScheduler.CONTINUE  # first at rung 4
    assert report(a, 4, 0.3) == TrialScheduler.STOP and "at epoch 4" in reasons["a"]
    assert report(c, 5, 0.1) == TrialScheduler.CONTINUE and "c" not in reasons


@pytest.mark.parametrize("rungs", ["geometric", "2,4"])
def test_asha_under_mode_min_stops_the_higher_loss_and_says_it_is_above_the_cutoff(rungs):
    """Bug caught: a sweep with --mode min whose ASHA culls the LOWER value at a rung (the mode not reaching Ray's
    scheduler), or whose stop reason says "below the rung cutoff" for a trial stopped for being above it."""
    from types import SimpleNamespace

    from ray.tune.schedulers import TrialScheduler

    reasons: dict = {}
    scheduler = build_scheduler(SweepOptions(rungs=rungs, grace_period=2, reduction_factor=2, stop_collapsed=False),
                                6, reasons)
    scheduler.set_search_properties("loss", "min")
    a, b, c = (SimpleNamespace(trial_id=name) for name in "abc")
    for trial in (a, b, c):
        scheduler.on_trial_add(None, trial)

    def report(trial, epoch, value):
        return scheduler.on_trial_result(None, trial, {"epoch": epoch, "loss": value})

    assert [report(a, e, 2.0) for e in (1, 2)] == [TrialScheduler.CONTINUE] * 2
    assert report(b, 1, 9.0) == report(b, 2, 1.0) == TrialScheduler.CONTINUE  # a lower loss than a's 2.0 goes on
    assert report(c, 1, 0.1) == TrialScheduler.CONTINUE
    assert report(c, 2, 3.0) == TrialScheduler.STOP  # above the cutoff (the median of 2.0 and 1.0)
    assert reasons == {"c": "asha: loss=3 above the rung cutoff at epoch 2"}


def test_placed_rungs_keep_the_guards():
    """Bug caught: PlacedASHA built without collapse-aware stopping and the budgets, which every scheduler carries."""
    scheduler = build_scheduler(SweepOptions(rungs="2,4", grace_period=3), 6, {})
    assert scheduler.guards is not None and decision_epochs(scheduler, 6) == (2, 3, 4)


@pytest.mark.parametrize("grace, factor, max_epochs", [(1, 3.0, 50), (2, 2.0, 20), (10, 1.1, 20), (1, 1.5, 10),
                                                       (3, 3.0, 9), (5, 4.0, 5)])
def test_the_recorded_geometric_rungs_are_rays(grace, factor, max_epochs):
    """Bug caught: sweep.json's ``rungs`` (tune.search.rungs.geometric_rungs) drifting from the rungs Ray's ASHA
    bracket judges at, e.g. a fractional rung (factor 1.5) recorded at the epoch before its decision."""
    from tune.search.rungs import geometric_rungs
    from tune.search.schedulers import asha_rungs

    options = SweepOptions(grace_period=grace, reduction_factor=factor, stop_collapsed=False)
    assert geometric_rungs(grace, factor, max_epochs) == asha_rungs(build_scheduler(options, max_epochs, {}))
