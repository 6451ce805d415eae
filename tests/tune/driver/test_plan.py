"""tune/driver/plan.py with tune/driver/sweep.py's start: the searcher and the scheduler are built once, while the
sweep is
planned (nothing written), and are the ones the Tuner runs; an optuna searcher's study reaches its live
journal only once the sweep's folder is written."""
from __future__ import annotations

import optuna
import ray

from tune.driver import plan as plan_module
from tune.driver.options import SweepOptions
from tune.driver.plan import prepare
from tune.driver.sweep import start
from tune.search.optuna_study import journal_storage

from ..conftest import TOY_SPACE


def test_searcher_and_scheduler_are_built_once_and_the_study_moves_to_the_journal(tmp_path, monkeypatch, ray_down):
    """Bugs caught: ``prepare`` building the searcher and scheduler to validate them and the Tuner building
    them again (two TPE samplers, a scheduler whose stop reasons the sink never sees); the live journal
    written by ``prepare`` (a refused sweep, or ``submit``'s check on the client, leaving a folder behind);
    the journal's study missing its name or objective, or the searcher still asking the in-memory one."""
    built = {"searcher": 0, "scheduler": 0}
    for name in built:
        real = getattr(plan_module, f"build_{name}")

        def counting(*args, _real=real, _name=name, **kwargs):
            built[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(plan_module, f"build_{name}", counting)
    (tmp_path / "toy.yaml").write_text(TOY_SPACE)
    options = SweepOptions(storage=str(tmp_path / "sweeps"), name="once", dashboard=False, search="optuna",
                           num_samples=2)
    plan = prepare(str(tmp_path / "toy.yaml"), options)
    assert not (tmp_path / "sweeps").exists()  # planned: nothing written
    assert built == {"searcher": 1, "scheduler": 1}
    tuner = start(plan)
    assert built == {"searcher": 1, "scheduler": 1}
    assert tuner.searcher is plan.searcher and tuner.scheduler is plan.scheduler
    assert tuner.sink.stop_reasons is plan.stop_reasons is plan.scheduler.stop_reasons
    study = optuna.load_study(study_name="once", storage=journal_storage(plan.optuna_journal))
    assert study.metric_names == ["recall_at_1"]
    plan.searcher.suggest("trial_a")  # the searcher now asks the journal's study
    assert len(optuna.load_study(study_name="once", storage=journal_storage(plan.optuna_journal)).trials) == 1
    assert not ray.is_initialized()


def test_a_gpu_sweep_over_the_memory_budget_without_a_cache_is_warned_once(tmp_path, monkeypatch):
    """Bug caught: a GPU sweep over CUB-sized data decoding every JPEG every epoch with no word said; or the
    warning on a CPU sweep, or with image_cache set."""
    import xbm.data.cache
    from tune.driver.sweep import gpu_data_warnings

    monkeypatch.setattr(xbm.data.cache, "MEMORY_BUDGET", 1000)
    (tmp_path / "digits.yaml").write_text("description: d\nbase: {dataset: digits, model: test_resnet, epochs: 1}\n"
                                          "params:\n  lr: {grid: [0.001, 0.01]}\n")

    def warnings_for(**options):
        plan = prepare(str(tmp_path / "digits.yaml"), SweepOptions(storage=str(tmp_path / "s"), dashboard=False,
                                                                    cpus_per_trial=4, **options))
        return gpu_data_warnings(plan)

    (only,) = warnings_for(gpus_per_trial=0.5)
    assert "image_cache" in only and "3 loader worker(s)" in only
    assert warnings_for() == []
    assert warnings_for(gpus_per_trial=0.5, overrides={"image_cache": str(tmp_path / "cache")}) == []
