"""tune/search/guards.py: collapse-aware stopping and the budgets, judged on hand-made results (no Ray), then on
real toy sweeps: a collapsing trial stopped at its second collapsed epoch, one below raw pixels at the grace
period, both kept with --no-stop-collapsed, and a time budget that ends a sweep with complete Parquet."""
from __future__ import annotations

import logging
import math

import pyarrow.parquet as pq
import pytest
from ray.tune import Callback

from tune.driver.options import SweepOptions
from tune.driver.plan import prepare
from tune.driver.sweep import start
from tune.search.guards import Budget, Guards, parse_duration
from tune.search.schedulers import SCHEDULERS, build_scheduler, decision_epochs

from ..conftest import run_toy_sweep

NAN = math.nan


def row(epoch, pos=5.0, recall=0.6, raw=0.5):
    return {"epoch": epoch, "loss_pos_pairs": pos, "recall_at_1": recall, "reference_raw_recall_at_1": raw}


def test_two_consecutive_collapsed_epochs_stop_a_trial_and_a_healthy_epoch_between_resets_the_count():
    """Bug caught: collapse judged on one epoch (a single bad epoch kills a trial), counted over
    non-consecutive epochs, or shared between trials."""
    guards = Guards({}, grace_period=5)
    assert guards.judge("a", row(1, pos=0.0)) is None
    assert guards.judge("b", row(1, pos=0.0)) is None  # another trial's count is its own
    assert guards.judge("a", row(2, pos=3.0)) is None  # healthy: the count starts again
    assert guards.judge("a", row(3, pos=0.0)) is None
    reason = guards.judge("a", row(4, pos=0.0))
    assert reason.startswith("collapsed:") and "2 consecutive epochs at epoch 4" in reason
    assert guards.judge("b", row(2, pos=0.0)).startswith("collapsed:")


def test_below_raw_pixels_is_judged_at_the_grace_period_on_evaluated_epochs_only():
    """Bug caught: a trial stopped before the grace period, judged on a NaN (unevaluated, eval_every) epoch,
    or judged on its last value instead of its best."""
    guards = Guards({}, grace_period=3)
    assert guards.judge("a", row(1, recall=0.40)) is None  # before the grace period
    assert guards.judge("a", row(2, recall=0.45)) is None
    assert guards.judge("a", row(3, recall=NAN)) is None  # not evaluated: no judgement
    reason = guards.judge("a", row(4, recall=0.30))  # best so far is 0.45 < 0.5
    assert reason.startswith("below raw pixels:") and "best recall_at_1=0.45 < reference_raw_recall_at_1=0.5" in reason
    assert guards.judge("b", row(3, recall=0.51)) is None  # above raw at the grace period
    assert guards.judge("c", row(3, recall=0.3, raw=NAN)) is None  # no reference: nothing to compare


def test_below_raw_pixels_waits_for_epoch_3_whatever_the_grace_period():
    """Bug caught: ASHA's default grace period of 1 stopping every from-scratch trial at epoch 1, where such
    models are still below raw pixels (Omniglot small, resnet18: 0.44-0.46 against 0.59) before they learn."""
    guards = Guards({}, grace_period=1)
    assert guards.raw_epoch == 3
    assert guards.judge("a", row(1, recall=0.40)) is None and guards.judge("a", row(2, recall=0.45)) is None
    assert "judged from epoch 3" in guards.judge("a", row(3, recall=0.44))
    assert Guards({}, grace_period=5).raw_epoch == 5


def test_no_stop_collapsed_keeps_every_trial():
    """Bug caught: --no-stop-collapsed ignored by the guards."""
    guards = Guards({}, stop_collapsed=False, grace_period=1)
    assert all(guards.judge("a", row(e, pos=0.0, recall=0.1)) is None for e in (1, 2, 3))


@pytest.mark.parametrize("text, seconds", [("90", 90.0), ("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0),
                                           ("0.5h", 1800.0)])
def test_time_budget_accepts_seconds_minutes_and_hours(text, seconds):
    """Bug caught: 2h read as 2 seconds (or minutes)."""
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["2d", "h", "-1m", "0"])
def test_a_bad_time_budget_names_the_flag_and_the_value(text):
    with pytest.raises(ValueError, match=f"--time-budget must be .*{text!r}"):
        parse_duration(text)


def test_budget_spent_by_time_or_gpu_hours():
    """Bug caught: GPU hours compared with seconds, or a budget never spent at exactly its value."""
    assert Budget(time_s=60).spent(59.9, 0.0) is None
    assert Budget(time_s=60).spent(60.0, 0.0).startswith("budget: the time budget (1m)")
    assert Budget(gpu_hours=10).spent(1e9, 9.99) is None
    assert "GPU-hour budget (10 h" in Budget(gpu_hours=10).spent(0.0, 10.0)


def test_a_spent_budget_is_logged_once_at_info_and_drops_the_pending_trials(caplog):
    """Bugs caught (issue 55): the budget message printed to stdout, so a notebook could neither silence nor
    route it (it is an INFO record of ``tune.search.guards``: ``xbm-tune --quiet`` hides it, the sweep's last
    line still says why it ended); or said again at every later result."""
    from types import SimpleNamespace

    from ray.tune.experiment import Trial

    stopped, finished = [], []
    pending = SimpleNamespace(trial_id="p", status=Trial.PENDING, last_result={}, config={})
    controller = SimpleNamespace(get_trials=lambda: [pending], stop_trial=stopped.append,
                                 search_alg=SimpleNamespace(set_finished=lambda: finished.append(True)))
    guards = Guards({}, budget=Budget(time_s=60), gpus_per_worker=0.0)
    times = iter([0.0, 30.0, 90.0, 120.0])
    guards.clock = lambda: next(times)
    caplog.set_level(logging.INFO, logger="tune.search.guards")
    for _ in range(4):
        guards.check_budget(controller)
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("tune.search.guards", logging.INFO, "budget: the time budget (1m) was spent: no new trial starts; running "
                                            "trials stop when their current epoch ends")]
    assert stopped == [pending] and finished == [True]
    assert guards.stop_reasons == {"p": "budget: the time budget (1m) was spent before it started"}


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_every_scheduler_carries_the_guards_and_decides_at_the_grace_period(name, tmp_path):
    """Bug caught: a scheduler of the registry without the guards (collapse-aware stopping silently off with
    it), or the grace period skipped by eval_every (the below-raw check then judged late)."""
    from tune.search.spaces import load_space

    (tmp_path / "s.yaml").write_text("description: s\nbase: {dataset: toy}\nparams:\n"
                                     "  lr: {loguniform: [1.0e-4, 1.0e-2], mutable: true}\n")
    population = name in ("pbt", "pb2")
    space, search = (load_space(str(tmp_path / "s.yaml")), "random") if population else (None, None)
    scheduler = build_scheduler(SweepOptions(scheduler=name, grace_period=4, search=search), 9, {}, space)
    assert isinstance(scheduler.guards, Guards) and scheduler.guards.grace_period == 4
    assert population or 4 in decision_epochs(scheduler, 9)  # PBT's/PB2's decision epochs are its intervals
    off = build_scheduler(SweepOptions(scheduler=name, stop_collapsed=False, search=search), 9, {}, space)
    assert off.guards is None


GUARDED = """description: one collapsing trial (no positive pair at pos_margin 2.5) and one that learns nothing (lr 1e-9)
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 4, warmup_epochs: 0, batch_size: 16,
       samples_per_class: 4, val_fraction: 0.2, device: cpu, lr: 1.0e-9, memory.enabled: false}
params:
  miner.pos_margin: {grid: [2.5, 0.2]}
"""


def _trials(plan):
    frame = pq.read_table(f"{plan.results_uri}/trials.parquet").to_pandas()
    return {round(r["config.miner.pos_margin"], 3): r for r in frame.to_dict("records")}


@pytest.mark.slow
def test_collapsed_and_below_raw_trials_are_stopped_and_kept_without_the_flag(ray_session, tmp_path):
    """Bug caught: a collapsed trial holding its slot to the end (FIFO never stops it), stopped at its first
    collapsed epoch, a trial below raw pixels not stopped at the grace period, or the reason not reaching
    trials.parquet's stop_reason; --no-stop-collapsed still stopping them."""
    plan, _ = run_toy_sweep(tmp_path, "guarded", GUARDED, search="grid", scheduler="fifo", grace_period=3)
    trials = _trials(plan)
    collapsed, below = trials[2.5], trials[0.2]
    assert collapsed["status"] == "stopped_early" and collapsed["epochs_completed"] == 2
    assert collapsed["stop_reason"].startswith("collapsed: the loss saw no positive pair")
    assert collapsed["collapsed_epochs"] == 2
    assert below["status"] == "stopped_early" and below["epochs_completed"] == 3
    assert below["stop_reason"].startswith("below raw pixels:") and "after 3/4 epochs" in below["stop_reason"]
    plan, _ = run_toy_sweep(tmp_path, "kept", GUARDED, search="grid", scheduler="fifo", grace_period=3,
                            stop_collapsed=False)
    assert {(r["status"], r["epochs_completed"]) for r in _trials(plan).values()} == {("completed", 4)}


class SpendOnFirstResult(Callback):
    """Moves the guards' clock a day on when the first epoch is reported: the budget is spent while the
    first trial trains its second epoch, whatever the machine's speed."""

    def __init__(self, guards) -> None:
        self.now = 0.0
        guards.clock = lambda: self.now

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.now = 86400.0


@pytest.mark.slow
def test_a_time_budget_ends_the_sweep_with_complete_parquet(ray_session, tmp_path):
    """Bug caught: a spent budget killing a trial mid-epoch (its epoch row lost), starting the next trial
    anyway, or leaving trials.parquet without the budget as stop_reason."""
    (tmp_path / "toy.yaml").write_text(GUARDED.replace("2.5, 0.2", "0.2, 0.3, 0.4"))
    plan = prepare(str(tmp_path / "toy.yaml"), SweepOptions(
        storage=str(tmp_path / "sweeps"), name="budget", dashboard=False, search="grid", scheduler="fifo",
        max_concurrent=1, stop_collapsed=False, time_budget_s=3600.0))  # one trial at a time
    guards = plan.scheduler.guards
    start(plan, callbacks=(SpendOnFirstResult(guards),)).tuner.fit()
    assert guards.spent == "budget: the time budget (1h) was spent"
    frame = pq.read_table(f"{plan.results_uri}/trials.parquet").to_pandas()
    ran = frame[frame.epochs_completed > 0]
    # the first trial finished the epoch it was in (its second), then stopped; no other trial trained
    assert len(ran) == 1 and ran.iloc[0]["epochs_completed"] == 2
    assert ran.iloc[0]["stop_reason"] == "budget: the time budget (1h) was spent after 2/4 epochs"
    assert frame.stop_reason.str.startswith("budget: the time budget").all()
    assert (frame.status == "stopped_early").all()
    epochs = pq.read_table(f"{plan.results_uri}/epochs").to_pandas()
    assert sorted(epochs.epoch) == [1, 2] and set(epochs.trial_id) == {ran.iloc[0]["trial_id"]}
