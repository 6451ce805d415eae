"""tune/search/rungs.py: ASHA's rungs placed by the LR schedule and the normaliser delay / memory start,
listed by hand, or geometric with a warning when they straddle the drops; what the plan and sweep.json carry."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import torch

from tune.driver.options import SweepOptions
from tune.driver.plan import prepare
from tune.errors import SweepInputError
from tune.results.record import sweep_record
from tune.results.trial_config import train_config
from tune.search.rungs import geometric_rungs, lr_drops, rung_epochs, straddle_warning
from tune.search.spaces import load_space
from xbm.training.optim import main_scheduler, scheduler_kwargs

from ..conftest import run_toy_sweep

BASE = "base: {dataset: toy, model: mlp, embedding_size: 16, warmup_epochs: 0, batch_size: 16, samples_per_class: 4"


def space(tmp_path, base: str = "", params: str = "  lr: {loguniform: [1.0e-4, 1.0e-2]}\n"):
    path = tmp_path / "s.yaml"
    path.write_text(f"description: rungs test\n{BASE}{', ' + base if base else ''}}}\nparams:\n{params}")
    return load_space(str(path))


def placed(tmp_path, base: str = "", params: str = "  lr: {loguniform: [1.0e-4, 1.0e-2]}\n", epochs: int = 50):
    return rung_epochs(SweepOptions(rungs="schedule"), space(tmp_path, f"epochs: {epochs}, {base}".rstrip(", "),
                                                                     params), epochs)


def torch_drops(**config) -> tuple[int, ...]:
    """Naive reference: step the trainer's own torch schedule and list the last epoch at each old rate."""
    cfg = train_config(config)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=cfg.lr)
    scheduler, rates = main_scheduler(optimizer, **scheduler_kwargs(cfg)), []
    for _ in range(cfg.epochs):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return tuple(e for e in range(1, cfg.epochs) if rates[e] < rates[e - 1] * (1 - 1e-9))


@pytest.mark.parametrize("config", [
    {"epochs": 50}, {"epochs": 50, "lr_step": 10, "lr_gamma": 0.5}, {"epochs": 30, "lr_gamma": 1.0},
    {"epochs": 40, "schedule": "multistep", "milestones": "8, 20"}, {"epochs": 40, "warmup_lr_epochs": 20},
    {"epochs": 40, "schedule": "multistep", "milestones": "3,30", "warmup_lr_epochs": 5}])
def test_lr_drops_are_the_trainers_own(config):
    """Bug caught: the rungs computed from a copy of the schedule that drifted from the trainer's (StepLR's
    floor(e / lr_step), multistep's milestones, the lr warm-up's ramp hiding a drop inside it)."""
    assert lr_drops(train_config(config)) == torch_drops(**config)


def test_rungs_sit_on_the_last_epoch_before_each_step_and_multistep_drop(tmp_path):
    """Bug caught: a rung one epoch late (the first epoch at the new rate, in the drop's transient), a rung at
    or past the last epoch (ASHA's max_t ends the trial there anyway), multistep's milestones ignored."""
    assert placed(tmp_path) == (15, 30, 45)  # lr_step=15: epochs 1..15 at lr, 16.. at lr * gamma
    assert placed(tmp_path, epochs=45) == (15, 30)
    assert placed(tmp_path, "schedule: multistep, milestones: '10,25'", epochs=40) == (10, 25)
    assert placed(tmp_path, "lr_step: 10, lr_gamma: 0.5", epochs=30) == (10, 20)


def test_a_rung_follows_the_normaliser_delay_and_the_memory_start(tmp_path):
    """Bug caught: the delay's rung at tau (the normaliser never ran) or tau + 1 (the memory still holds
    embeddings stored before adaptation); a start that is off (no normaliser, no memory) placing a rung; a
    swept delay placed for its smallest value (trials with the largest judged before their normaliser ran)."""
    assert placed(tmp_path, "normaliser.kind: xbn, normaliser.delay_epochs: 5") == (7, 15, 30, 45)
    assert placed(tmp_path, "memory.start_epoch: 20") == (15, 22, 30, 45)
    assert placed(tmp_path, "normaliser.delay_epochs: 5") == (15, 30, 45)  # kind none: the delay does nothing
    assert placed(tmp_path, "memory.enabled: false, memory.start_epoch: 20") == (15, 30, 45)
    swept = "  normaliser.kind: {choice: [none, xbn]}\n  normaliser.delay_epochs: {int: [0, 8]}\n"
    assert placed(tmp_path, params=swept) == (10, 15, 30, 45)
    assert placed(tmp_path, "schedule: cosine, normaliser.kind: xbn, normaliser.delay_epochs: 3") == (5,)


def test_no_schedule_rung_comes_before_a_swept_start_has_run(tmp_path):
    """Bug caught: --rungs schedule on thesis Table 5.6's delay grid (tau up to 30, lr_step 15) put a rung at
    the LR drop at epoch 15, where trials with tau = 15, 20, 30 have not yet run their normaliser, so the
    fairness check flagged the schedule's own rungs and --strict refused the paper's table; a fixed start
    losing the drops before it (every trial waits alike there); a swept start past the budget leaving no
    rung without naming why."""
    tau = "  normaliser.delay_epochs: {grid: [0, 5, 10, 15, 20, 30]}\n"
    assert placed(tmp_path, "normaliser.kind: xbn", params=tau) == (32, 45)
    options = SweepOptions(storage=str(tmp_path / "sweeps"), name="d", dashboard=False, search="grid",
                           rungs="schedule", strict=True)
    plan = prepare(str(tmp_path / "s.yaml"), options)  # --strict: refused before the fix
    assert plan.rungs == (32, 45) and not any("culled" in w for w in plan.warnings)
    shipped = load_space("thesis_table5_6_delay")
    rungs = rung_epochs(SweepOptions(rungs="schedule"), shipped, 50)
    assert rungs == (32, 45) and shipped.fairness_warnings(rungs[0], "asha") == []
    assert placed(tmp_path, "normaliser.kind: xbn, normaliser.delay_epochs: 20") == (15, 22, 30, 45)  # fixed
    with pytest.raises(SweepInputError, match=r"no fair epoch.*delay_epochs.*reach 30.*32"):
        placed(tmp_path, "normaliser.kind: xbn", params=tau, epochs=32)


def test_unplaceable_schedules_are_refused(tmp_path):
    """Bug caught: a sweep whose trials drop their rate at different epochs given one set of rungs (each
    rung before a drop for some trials and in a transient for others), or a cosine schedule given no rung
    at all (ASHA would never stop a trial) without a word."""
    with pytest.raises(SweepInputError, match=r"same LR drops.*\['lr_step'\].*--rungs E1,E2"):
        placed(tmp_path, params="  lr_step: {choice: [10, 15]}\n")
    with pytest.raises(SweepInputError, match="no epoch to place a rung.*schedule=cosine"):
        placed(tmp_path, "schedule: cosine")
    # a swept gamma below 1 moves no drop: placed (its extremes are checked)
    assert placed(tmp_path, params="  lr_gamma: {uniform: [0.1, 0.5]}\n") == (15, 30, 45)


def test_a_listed_rung_set_is_honoured_and_checked(tmp_path):
    """Bug caught: --rungs 5,12 replaced by the geometric rungs, or a list past the budget accepted (a rung
    Ray never reaches); --rungs on a scheduler that has no rungs accepted silently."""
    sp = space(tmp_path, "epochs: 20")
    assert rung_epochs(SweepOptions(rungs="5,12"), sp, 20) == (5, 12)
    assert rung_epochs(SweepOptions(), sp, 20) == geometric_rungs(1, 3.0, 20) == (1, 3, 9)
    with pytest.raises(SweepInputError, match="below the epoch budget"):
        rung_epochs(SweepOptions(rungs="5,20"), sp, 20)
    for bad in ("12,5", "soon", "0,3"):
        with pytest.raises(SweepInputError, match="--rungs must satisfy"):
            SweepOptions(rungs=bad)
    with pytest.raises(SweepInputError, match="unless --scheduler asha"):
        SweepOptions(rungs="schedule", scheduler="fifo")


def test_geometric_rungs_straddling_the_drops_are_warned_at_plan_time_and_recorded(tmp_path):
    """Bug caught: the default rungs 1, 3, 9, 27 judging trials mid-plateau and after the drop at 15 with no
    word said; a warning for placed rungs; sweep.json without the rungs the sweep was judged at."""
    sp = space(tmp_path, "epochs: 50")
    assert "rungs [1, 3, 9, 27] straddle the LR drops" in straddle_warning((1, 3, 9, 27), sp)
    assert straddle_warning((15, 30, 45), sp) is None
    options = SweepOptions(storage=str(tmp_path / "sweeps"), name="r", dashboard=False, search="random")
    plan = prepare(str(tmp_path / "s.yaml"), options)
    assert plan.rungs == (1, 3, 9, 27) and any("straddle the LR drops" in w for w in plan.warnings)
    assert sweep_record(plan).to_dict()["rungs"] == [1, 3, 9, 27]
    plan = prepare(str(tmp_path / "s.yaml"), options.replace(rungs="schedule"))
    assert plan.rungs == (15, 30, 45) and not any("straddle" in w for w in plan.warnings)
    assert sweep_record(plan).to_dict()["rungs"] == [15, 30, 45]
    assert prepare(str(tmp_path / "s.yaml"), options.replace(scheduler="fifo")).rungs is None


def test_the_flag_reaches_the_options_and_resume_rebuilds_the_recorded_rungs():
    """Bug caught: --rungs dropped between the CLI and the options (sweep.json's ``options``), an options record
    written before --rungs failing to load, or ``resume`` (no space to place rungs from) refusing a
    --rungs schedule sweep, or deciding at other epochs than those it recorded."""
    from tune.cli import build_parser
    from tune.commands._arguments import options_from
    from tune.search.rungs import recorded_rungs
    from tune.search.schedulers import build_scheduler, decision_epochs

    args = build_parser().parse_args(["sweep", "quickstart", "--rungs", "schedule"])
    options = options_from(args)
    assert options.rungs == "schedule" and SweepOptions.from_record(options.to_dict()).rungs == "schedule"
    assert SweepOptions.from_record({"scheduler": "asha", "grace_period": 2}).rungs == "geometric"
    resumed = build_scheduler(recorded_rungs(options.replace(stop_collapsed=False), (15, 30, 45)), 50, {})
    assert decision_epochs(resumed, 50) == (15, 30, 45)
    assert recorded_rungs(SweepOptions(), (1, 3, 9, 27)) == SweepOptions()  # geometric: rebuilt as it was


@pytest.mark.slow
def test_a_toy_sweep_judges_at_the_listed_rungs_only(ray_session, tmp_path):
    """Bug caught: the listed rungs not reaching Ray (trials stopped at geometric epochs 1 or 3), a rung epoch
    not evaluated under eval_every (the decision taken on a missing value), sweep.json without ``rungs``."""
    text = (f"description: rungs end to end\n{BASE}, epochs: 5, eval_every: 5, device: cpu}}\n"
            "params:\n  memory.ratio: {uniform: [0.1, 1.0]}\n  lr: {loguniform: [1.0e-5, 1.0e-1]}\n")
    plan, _ = run_toy_sweep(tmp_path, "listed", text, search="random", num_samples=4, max_concurrent=1,
                            rungs="2,4", reduction_factor=2, stop_collapsed=False, seed=3)
    assert plan.rungs == (2, 4)
    assert '"rungs": [\n    2,\n    4\n  ]' in (tmp_path / "sweeps" / "listed" / "results" / "sweep.json").read_text()
    trials = pq.read_table(f"{plan.results_uri}/trials.parquet").to_pandas()
    assert set(trials.epochs_completed) <= {2, 4, 5}
    stopped = trials[trials.status == "stopped_early"]  # seeded: lr over 4 decades, some trials fall behind
    assert len(stopped) >= 1 and stopped.stop_reason.str.match(r"asha: recall_at_1=\S+ below the rung cutoff at "
                                                                r"epoch [24] ").all()
    epochs = pq.read_table(f"{plan.results_uri}/epochs").to_pandas()
    evaluated = set(epochs.loc[epochs.recall_at_1.notna(), "epoch"])
    assert evaluated == {2, 4, 5} & set(epochs.epoch)
