"""Which epochs a scheduler decides at (tune.search.schedulers.decision_epochs): those a trial always evaluates."""
from tune.options import SweepOptions
from tune.search.schedulers import build_scheduler, decision_epochs


def _epochs(scheduler, max_epochs=9, **options):
    options.setdefault("stop_collapsed", False)  # the scheduler's own decisions (the guards' below)
    return decision_epochs(build_scheduler(SweepOptions(scheduler=scheduler, **options), max_epochs, {}), max_epochs)


def test_asha_decides_at_its_rungs_fifo_never_and_others_every_epoch():
    """Bug caught: eval_every skipping an ASHA rung (the trial ranked on a NaN, or on a stale value), rungs
    computed from the wrong base (grace period x factor^k), or HyperBand's brackets assumed to be ASHA's;
    with collapse-aware stopping (tune.trial.guards) the grace period is decided at too, under FIFO as well."""
    assert _epochs("asha", grace_period=1, reduction_factor=3) == (1, 3, 9)
    assert _epochs("asha", 20, grace_period=2, reduction_factor=2) == (2, 4, 8, 16)
    assert _epochs("asha", 20, grace_period=3, reduction_factor=2, stop_collapsed=False) == (3, 6, 12)
    assert _epochs("fifo", stop_collapsed=False) == ()
    assert _epochs("fifo", grace_period=4, stop_collapsed=True) == (4,)  # the below-raw-pixels check
    assert _epochs("hyperband", 4) == (1, 2, 3, 4)
    # collapse-aware stopping judges raw pixels at max(grace period, 3): that epoch is evaluated too
    assert _epochs("fifo", stop_collapsed=True) == (3,) and _epochs("fifo", 2, stop_collapsed=True) == ()
