"""Population Based Bandits (``--scheduler pb2``): bounds derived from the space, explored values clipped to
them, PBT's machinery shared (checks, checkpoints at each interval, exploits recorded)."""
from __future__ import annotations

import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from tune.driver.options import SweepOptions
from tune.driver.plan import prepare
from tune.driver.sweep import start, trial_policy
from tune.errors import SweepInputError
from tune.results.record import outcome
from tune.search.pb2 import ClipToBounds, RecordingPB2, hyperparam_bounds

PB2 = """description: pb2 on the toy set
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 3, warmup_epochs: 0, batch_size: 32,
       samples_per_class: 4, device: cpu, val_fraction: 0.2, normaliser.kind: pcxbn}
params:
  normaliser.lambda_mu: {uniform: [0.0, 1.0], mutable: true}
  lr: {loguniform: [1.0e-6, 3.0e-3], mutable: true}
  miner.pos_margin: {choice: [0.1, 0.3, 0.2], mutable: true}
  clip_grad: {int: [1, 10], mutable: true}
  memory.ratio: {uniform: [0.2, 1.0]}
"""
BOUNDS = {"normaliser.lambda_mu": [0.0, 1.0], "lr": [1e-6, 3e-3], "miner.pos_margin": [0.1, 0.3], "clip_grad": [1, 10]}


def _plan(tmp_path, space, name="pb2", **options):
    (tmp_path / f"{name}.yaml").write_text(space)
    options = {"perturbation_interval": 1, **options}
    return prepare(str(tmp_path / f"{name}.yaml"), SweepOptions(
        scheduler="pb2", num_samples=2, storage=str(tmp_path / "out"), name=name, dashboard=False, **options))


def test_bounds_are_each_mutable_params_range_and_reach_ray(tmp_path):
    """Bugs caught: PB2 given the log of a log-uniform range (its GP maps [0, 1] back linearly: lr would be
    explored in [-13.8, -5.8]), a choice's first/last value instead of its min/max (0.1-0.2, not 0.1-0.3), an
    immutable param (memory.ratio) handed to explore, or bounds computed but not given to Ray's scheduler."""
    plan = _plan(tmp_path, PB2)
    assert hyperparam_bounds(plan.space) == BOUNDS
    assert isinstance(plan.scheduler, RecordingPB2) and plan.scheduler._hyperparam_bounds == BOUNDS
    assert plan.options.search == "random"  # the population is drawn from the space's own distributions


def test_an_explored_value_is_clipped_into_its_bounds_as_a_python_number():
    """Bug caught: Ray's PB2 casts its point to float32, and float32(3e-3) = 0.0030000000260770321 lies above
    the bound (a config rule such as lambda_mu <= 1 would fail the trial at the same float rounding), or an
    int param (int distribution) left a float."""
    explored = {"lr": np.float32(3e-3), "normaliser.lambda_mu": np.float32(-1e-9), "clip_grad": 7.6, "seed": 3}
    assert float(explored["lr"]) > 3e-3
    clipped = ClipToBounds(BOUNDS)(explored)
    assert clipped == {"lr": 3e-3, "normaliser.lambda_mu": 0.0, "clip_grad": 8, "seed": 3}
    assert type(clipped["lr"]) is float and type(clipped["clip_grad"]) is int


def test_a_mutable_param_that_is_not_a_number_is_refused_naming_it(tmp_path, monkeypatch):
    """Bug caught: a categorical mutable param reaching PB2's GP (Ray would fail mid-sweep comparing 'sgd' with
    a bound). No mutable key today takes text, so one is made mutable here to reach the rule."""
    import xbm.config

    monkeypatch.setattr(xbm.config, "MUTABLE_KEYS", (*xbm.config.MUTABLE_KEYS, "optimizer"))
    space = PB2.replace("  clip_grad: {int: [1, 10], mutable: true}\n",
                        "  optimizer: {choice: [adamw, sgd], mutable: true}\n")
    with pytest.raises(SweepInputError, match=r"mutable param 'optimizer' is choice \['adamw', 'sgd'\].*numeric"):
        _plan(tmp_path, space)
    with pytest.raises(SweepInputError, match="--search random"):  # PBT's own checks hold for PB2 too
        _plan(tmp_path, PB2, name="tpe", search="optuna")


def test_pb2_without_scikit_learn_exits_before_ray_naming_the_package(tmp_path, monkeypatch):
    """Bug caught: Ray's 'Please install scikit-learn to use PB2' RuntimeError surfacing as a crash instead of
    an input error (exit 2) saying what to install."""
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(SweepInputError, match="--scheduler pb2 needs the package 'sklearn'.*pip install"):
        _plan(tmp_path, PB2)
    assert not (tmp_path / "out").exists()


def test_pb2_trials_checkpoint_at_every_interval_like_pbt(tmp_path):
    """Bug caught: PB2 treated as an ordinary scheduler (checkpoints by time only): an exploit would find no
    donor checkpoint at the interval, or restore without re-applying the mutable keys."""
    plan = _plan(tmp_path, PB2.replace("epochs: 3", "epochs: 6"), perturbation_interval=2)
    policy = trial_policy(plan.options, plan.scheduler, plan.max_epochs, plan.space.mutable)
    assert policy.evaluate_at == (2, 4, 6) and policy.checkpoint_every == 2
    assert policy.mutable == ("normaliser.lambda_mu", "lr", "miner.pos_margin", "clip_grad")


@pytest.mark.slow
def test_a_pb2_sweep_exploits_and_trains_with_gp_chosen_values_inside_the_bounds(ray_session, tmp_path):
    """Bugs caught: PB2's exploits not recorded (RecordsExploits' hook missed by PB2), explored values that
    never reach the trainer (epoch rows keep the first config), or values outside the space's bounds.

    Synchronous, 2 trials, interval 1, 3 epochs: at epoch 1 PB2 has no change of the metric to fit yet and
    copies the donor's values; at epoch 2 its GP picks new ones, which epoch 3 trains with."""
    plan = _plan(tmp_path, PB2, cpus_per_trial=0.5, stop_collapsed=False, pbt_synch=True)
    start(plan).tuner.fit()
    trials = outcome(plan.experiment_uri, "recall_at_1", "max").trials
    assert (trials.status == "completed").all(), trials[["trial_id", "status", "error"]]
    exploits = [e for text in trials["exploits"].dropna() for e in text.split("; ")]
    assert {int(e.rsplit("@", 1)[1]) for e in exploits} >= {1, 2}, exploits  # one exploit per interval
    rows = {t: pq.read_table(f"{plan.results_uri}/epochs/{t}.parquet").to_pandas() for t in trials.trial_id}
    initial = {key: {r.loc[r.epoch == 1, f"config.{key}"].item() for r in rows.values()} for key in BOUNDS}
    explored = []
    for trial_rows in rows.values():
        assert trial_rows.epoch.tolist() == [1, 2, 3]
        for key, (lo, hi) in BOUNDS.items():
            values = trial_rows[f"config.{key}"]
            assert values.between(lo, hi).all(), (key, values.tolist())
            explored += [v for v in values if v not in initial[key]]
    assert explored, "no epoch trained with a value PB2's GP chose"
