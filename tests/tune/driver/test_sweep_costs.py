"""Where a sweep's time goes and what eval_every changes, on toy sweeps (issue 18)."""
from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest

from analysis.costs import time_breakdown
from tune.driver.options import SweepOptions
from tune.driver.plan import prepare
from tune.driver.sweep import start
from tune.results.record import outcome
from tune.results.status import load_status, status_table

# batch 4 (2 classes x 2): epochs of about a second, so Tune's per-result round trip is a small part of them; and
# 6 of them. Tune's clock (the sum of its step() calls) counts what no column bills, once per trial: the time
# before the trainable's own clock starts, and the last report's checkpoint upload (each earlier report's goes
# to the next row's checkpoint_s). With 3 epochs that took 1.15 s of a trial's 11.1 s in one CI run on a busy
# machine (10.4%, over the 10% below), parts above the wall time by 0.03 s on an idle one: more epochs dilute it
LONG_EPOCHS = """description: costs
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 6, warmup_epochs: 2, batch_size: 4,
       samples_per_class: 2, lr: 1.0e-3, device: cpu}
params:
  seed: {grid: [0, 1]}
"""
ASHA = """description: eval_every under asha (the tiny learning rates fall behind and ASHA stops them)
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 9, warmup_epochs: 0, batch_size: 32,
       samples_per_class: 4, device: cpu, val_fraction: 0.2,
       normaliser.kind: xbn}
params:
  lr: {grid: [1.0e-3, 1.0e-6, 3.0e-4, 1.0e-7]}
"""


def _sweep(tmp_path, name, space, **options):
    (tmp_path / f"{name}.yaml").write_text(space)
    plan = prepare(str(tmp_path / f"{name}.yaml"), SweepOptions(
        search="grid", num_samples=1, max_concurrent=1, storage=str(tmp_path / "out"), name=name,
        dashboard=False, **{"stop_collapsed": False, **options}))  # every trial runs its epochs
    start(plan).tuner.fit()
    return plan, outcome(plan.experiment_uri, "recall_at_1", "max").trials


@pytest.mark.slow
def test_the_time_columns_account_for_each_trials_wall_time(ray_session, tmp_path):
    """Bug caught: a part of a trial's time counted twice (the set-up, or the warm-up in both setup_s and the
    first epoch: 13-30% of a trial here) or left out, over a tenth of the wall time, so that the training
    fraction a user reads is wrong; and the status line missing. Parts under that tenth are below what this
    can resolve on a shared machine (evaluation 4-6% of a trial, checkpoints 2%): evaluation inside train_s is
    tests/xbm/trainer/test_trainer_costs.py's to catch."""
    plan, trials = _sweep(tmp_path, "costs", LONG_EPOCHS, scheduler="fifo", checkpoint_period=0)
    assert len(trials) == 2 and (trials.status == "completed").all()
    for _, trial in trials.iterrows():
        parts = trial.train_s + trial.eval_s + trial.checkpoint_s + trial.setup_s
        assert abs(parts - trial.wall_time_s) <= 0.1 * trial.wall_time_s, trial[
            ["train_s", "eval_s", "checkpoint_s", "setup_s", "wall_time_s"]].to_dict()
        assert 0 < trial.data_wait_s < trial.train_s
        assert trial.train_fraction == pytest.approx(trial.train_s / trial.wall_time_s)
    shares = time_breakdown(trials)  # pooled over trials, and nothing left unaccounted beyond the 10%
    assert shares["training"] == pytest.approx(trials.train_s.sum() / trials.wall_time_s.sum())
    assert shares["other"] <= 0.1
    record, frame = load_status(plan.experiment_uri)
    assert "time: training " in status_table(record, frame)


@pytest.mark.slow
def test_eval_every_skips_evaluations_but_never_a_rung_and_asha_decides_the_same(ray_session, tmp_path):
    """Bugs caught: an ASHA rung epoch left unevaluated (the trial ranked on NaN: stopped or kept blindly),
    the last epoch unevaluated, or eval_every changing what is learnt, so that ASHA's decisions on the same
    seeded sweep depend on how often it evaluates."""
    options = dict(scheduler="asha", grace_period=2, reduction_factor=3)
    every_plan, every = _sweep(tmp_path, "every", ASHA, **options)
    plan, sparse = _sweep(tmp_path, "sparse", ASHA, **options, overrides={"eval_every": 4})
    key = "config.lr"
    decided = {name: t.set_index(key)[["status", "epochs_completed"]].sort_index()
               for name, t in (("every", every), ("sparse", sparse))}
    assert decided["every"].equals(decided["sparse"]), decided
    assert (every.status == "stopped_early").any() and (every.status == "completed").any()  # ASHA decided
    pairs = every.set_index(key).trial_id.to_dict()
    for _, trial in sparse.iterrows():
        rows = pq.read_table(f"{plan.results_uri}/epochs/{trial.trial_id}.parquet").to_pandas()
        measured = {int(e): v for e, v in zip(rows.epoch, rows.recall_at_1) if not math.isnan(v)}
        done = int(trial.epochs_completed)
        assert sorted(measured) == [e for e in (2, 4, 6, 8, 9) if e <= done], (trial.trial_id, measured)
        twin = pq.read_table(f"{every_plan.results_uri}/epochs/{pairs[trial[key]]}.parquet").to_pandas()
        assert all(twin.set_index("epoch").recall_at_1[e] == v for e, v in measured.items())  # same learning
