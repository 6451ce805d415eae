"""Population-based training (``--scheduler pbt``): mutable params, exploits that carry the whole trainer
state, and the schedules recorded epoch by epoch."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from tune.driver.options import SweepOptions
from tune.driver.plan import prepare
from tune.driver.sweep import start
from tune.errors import SweepInputError
from tune.results.record import outcome
from tune.search.spaces.errors import SpaceError

PBT = """description: pbt on the toy set
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 3, warmup_epochs: 0, batch_size: 32,
       samples_per_class: 4, device: cpu, val_fraction: 0.2, normaliser.kind: pcxbn}
params:
  normaliser.lambda_mu: {uniform: [0.0, 1.0], mutable: true}
  lr: {loguniform: [1.0e-6, 3.0e-3], mutable: true}
"""


def _plan(tmp_path, space, name="pbt", **options):
    (tmp_path / f"{name}.yaml").write_text(space)
    return prepare(str(tmp_path / f"{name}.yaml"), SweepOptions(
        scheduler="pbt", num_samples=4, perturbation_interval=2, storage=str(tmp_path / "out"), name=name,
        dashboard=False, **options))


@pytest.mark.parametrize("param, message", [
    ("memory.ratio: {uniform: [0.1, 1.0], mutable: true}", "memory.ratio.*preallocated ring buffer"),
    ("model: {choice: [mlp, resnet18], mutable: true}", "model.*one architecture"),
    ("normaliser.lambda_mu: {grid: [0.1, 0.5], mutable: true}", "one unconditional distribution"),
])
def test_a_key_that_cannot_change_mid_run_is_refused_as_mutable(tmp_path, param, message):
    """Bug caught: PBT perturbing the memory size or the model mid-run (the restored state would not fit, or
    would silently mean another experiment), or a grid 'perturbed' outside its points."""
    with pytest.raises(SpaceError, match=message):
        _plan(tmp_path, f"description: bad\nbase: {{dataset: toy}}\nparams:\n  {param}\n")


def test_pbt_needs_mutable_params_and_random_search(tmp_path):
    """Bug caught: a PBT sweep with nothing to explore (it would only copy weights between trials), or under
    a searcher whose suggestions PBT's explore would silently contradict."""
    with pytest.raises(SweepInputError, match="mutable: true"):
        _plan(tmp_path, PBT.replace(", mutable: true", ""), name="fixed")
    with pytest.raises(SweepInputError, match="--search random"):
        _plan(tmp_path, PBT, name="tpe", search="optuna")
    plan = _plan(tmp_path, PBT)
    assert plan.options.search == "random" and plan.space.mutable == ("normaliser.lambda_mu", "lr")


@pytest.mark.parametrize("factor, start, explored", [
    (1.2, {"normaliser.lambda_mu": 0.97, "lr": 2.9e-3, "miner.pos_margin": 0.2, "clip_grad": 9},
     {"normaliser.lambda_mu": 1.0, "lr": 3e-3, "miner.pos_margin": 0.3, "clip_grad": 10}),
    (0.8, {"normaliser.lambda_mu": 0.5, "lr": 1.1e-6, "miner.pos_margin": 0.1, "clip_grad": 1},
     {"normaliser.lambda_mu": 0.4, "lr": 1e-6, "miner.pos_margin": 0.1, "clip_grad": 1}),
])
def test_explore_keeps_every_value_inside_its_space_and_the_config_valid(tmp_path, monkeypatch, factor, start,
                                                                          explored):
    """Bugs caught: Ray's PBT multiplying a range's value out of it, unclipped (lambda_mu 0.97 explored to
    1.17: the config refused it when the trial restarted, and the sweep stopped: seen in CI), and a choice
    explored as a range (a margin of 0.2 multiplied to 0.24, a value the space never lists) instead of moving
    to the next listed value (the list is sorted: 0.3, not 0.1's neighbour in the order written)."""
    import random

    from ray.tune.schedulers.pbt import _explore

    from tune.results.trial_config import train_config

    space = PBT.replace("  lr:", "  miner.pos_margin: {choice: [0.1, 0.3, 0.2], mutable: true}\n"
                                 "  clip_grad: {int: [1, 10], mutable: true}\n  lr:")
    scheduler = _plan(tmp_path, space, name="explore").scheduler
    shift = 1 if factor > 1 else -1   # a choice moves up with the larger factor, down with the smaller
    monkeypatch.setattr(random, "choice", lambda options: shift if options == [-1, 1] else options[0])
    config, _ = _explore(dict(start), scheduler._hyperparam_mutations, resample_probability=0.0,
                         perturbation_factors=(factor,), custom_explore_fn=scheduler._custom_explore_fn)
    assert config == pytest.approx(explored) and type(config["clip_grad"]) is int
    train_config({**config, "normaliser.kind": "pcxbn"})   # what the sink and the trial build from it


@pytest.mark.slow
def test_a_pbt_sweep_exploits_records_and_changes_the_values_mid_run(ray_session, tmp_path):
    """Bugs caught: exploits not recorded (no way to read a trial's schedule), epoch rows that keep the
    trial's first config after an explore (the Parquet would lie about which lambda_mu trained an epoch),
    or an exploiting trial that restarts from scratch instead of continuing its donor's epochs."""
    # synchronous PBT: at each interval the bottom quarter exploits whatever order the trials report in (the
    # asynchronous one exploits only a donor that has reached the interval first: timing decides). 3 epochs: one
    # perturbation (at 2) and an epoch after it. Each round pauses every trial, and Tune keeps a paused trial's
    # actor only for a pending one, so each round starts new actors (12-15 s of imports each): at 5 epochs on
    # 2 CPUs, 11 actors and 131 CPU-s; at 3 epochs on the shared 1-CPU Ray, 3 actors and 38 CPU-s.
    plan = _plan(tmp_path, PBT, cpus_per_trial=0.5, stop_collapsed=False, pbt_synch=True)
    start(plan).tuner.fit()
    trials = outcome(plan.experiment_uri, "recall_at_1", "max").trials
    assert (trials.status == "completed").all(), trials[["trial_id", "status", "error"]]
    exploited = trials[trials["exploits"].notna()]
    assert len(exploited) >= 1, trials[["trial_id", "best_recall_at_1"]]
    for _, trial in exploited.iterrows():
        rows = pq.read_table(f"{plan.results_uri}/epochs/{trial.trial_id}.parquet").to_pandas()
        assert rows.epoch.tolist() == list(range(1, 4))  # continued at the donor's epoch, not restarted
        assert rows["config.normaliser.lambda_mu"].nunique() > 1 or rows["config.lr"].nunique() > 1
        donor, epoch = trial.exploits.split("; ")[0].split("@")
        assert donor in set(trials.trial_id) and int(epoch) % 2 == 0
    record = __import__("json").loads(open(f"{plan.results_uri}/sweep.json").read())
    assert record["space"]["params"]["lr"]["mutable"] is True


def test_schedules_and_exploits_read_back_from_the_parquet(tmp_path):
    """Bugs caught: a schedule table that misses a param changed mid-run (or lists fixed ones), or exploits
    parsed with the wrong donor when trial ids contain '@'-free text (the donor's epoch is the last field)."""
    import pandas as pd

    from analysis.loader import Sweep
    from analysis.schedules import exploits, schedules

    epochs = pd.DataFrame({"trial_id": ["a", "a", "b", "b"], "variant": "x", "epoch": [1, 2, 1, 2],
                           "stage": "sweep", "config.lr": [1e-3, 2e-3, 1e-3, 1e-3],
                           "config.normaliser.lambda_mu": [0.5, 0.5, 0.5, 0.5]})
    trials = pd.DataFrame({"trial_id": ["a", "b"], "stage": "sweep", "exploits": ["b_00001@2; c@4", None]})
    sweep = Sweep(trials, epochs)
    table = schedules(sweep)
    assert set(table.param) == {"lr"} and table[table.trial_id == "a"].value.tolist() == [1e-3, 2e-3]
    assert exploits(sweep).to_dict("records") == [{"trial_id": "a", "donor": "b_00001", "epoch": 2},
                                                  {"trial_id": "a", "donor": "c", "epoch": 4}]
