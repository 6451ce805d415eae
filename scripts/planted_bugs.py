"""The bugs of issue 12's table (and a few more), planted one at a time in a scratch copy of the repository,
each followed by the tests that must catch it: every line must read CAUGHT. Not part of CI (about 2 minutes);
run it after changing a test named here, to see it still catches its bug.

    python scripts/planted_bugs.py                       # every bug
    python scripts/planted_bugs.py "cosine becomes Lp"   # one
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
PLANTS = [
    ("normaliser from kind and delay only", "xbm/trainer/parts.py",
     "normaliser = build_normaliser(cfg.normaliser, superclass_of=superclass_of, num_labels=num_labels)",
     "from xbm.normalisers import NormaliserConfig as _N; normaliser = build_normaliser(_N(kind=cfg.normaliser.kind, delay_epochs=cfg.normaliser.delay_epochs), superclass_of=superclass_of, num_labels=num_labels)",
     ["tests/xbm/test_config_wiring.py", "tests/xbm/trainer/test_trainer.py::test_every_normaliser_kind_trains_end_to_end_and_changes_the_run"]),
    ("always kind none", "xbm/trainer/parts.py",
     "normaliser = build_normaliser(cfg.normaliser, superclass_of=superclass_of, num_labels=num_labels)",
     "import dataclasses as _d; normaliser = build_normaliser(_d.replace(cfg.normaliser, kind='none'), superclass_of=superclass_of, num_labels=num_labels)",
     ["tests/xbm/test_config_wiring.py", "tests/xbm/trainer/test_trainer.py::test_every_normaliser_kind_trains_end_to_end_and_changes_the_run"]),
    ("batch_loss_weight forced to 0", "xbm/trainer/parts.py",
     "batch_loss_weight=cfg.memory.batch_loss_weight,", "batch_loss_weight=0.0,",
     ["tests/xbm/test_config_wiring.py"]),
    ("cosine becomes Lp", "xbm/registries.py",
     '{"cosine": "pytorch_metric_learning.distances:CosineSimilarity",',
     '{"cosine": "pytorch_metric_learning.distances:LpDistance",',
     ["tests/xbm/test_config_wiring.py", "tests/xbm/losses/test_criteria.py"]),
    ("lr_step ignored", "xbm/training/optim.py",
     "return self.gamma ** (e // self.lr_step)", "return self.gamma ** (e // 10**9)",
     ["tests/xbm/test_config_wiring.py", "tests/xbm/training/test_optim.py"]),
    ("warm-up lr 0", "xbm/training/optim.py",
     "return torch.optim.SGD(params, lr=WARMUP_LR,", "return torch.optim.SGD(params, lr=0.0,",
     ["tests/xbm/training/test_optim.py", "tests/xbm/trainer/test_trainer.py::test_warmup_trains_the_head_alone_with_the_backbone_frozen_in_eval_mode"]),
    ("memory size floor", "xbm/losses/criteria.py",
     "max(1, math.ceil(ratio * n_train))", "max(1, math.floor(ratio * n_train))",
     ["tests/xbm/test_config_wiring.py", "tests/xbm/losses/test_criteria.py"]),
    ("paired p one-sided", "analysis/compare.py",
     'stats.ttest_1samp(pairs["diff"], 0.0).pvalue', 'stats.ttest_1samp(pairs["diff"], 0.0, alternative="greater").pvalue',
     ["tests/analysis/test_compare.py"]),
    ("no clipping", "xbm/training/epoch.py",
     "if step.clip_grad > 0:", "if False:",
     ["tests/xbm/test_config_wiring.py", "tests/xbm/training/test_epoch.py"]),
    ("amp bf16 ignored on cpu", "xbm/runtime/device.py",
     'return torch.float16 if amp == "fp16" else torch.bfloat16', 'return torch.float16 if amp == "fp16" else None',
     ["tests/xbm/test_config_wiring.py", "tests/xbm/runtime/test_device.py"]),
    ("evaluation moves the global RNG", "xbm/training/loaders.py",
     "generator=torch.Generator().manual_seed(0))", "generator=None)",
     ["tests/xbm/trainer/test_trainer.py::test_evaluate_test_never_changes_training"]),
    ("warm-up backbone in train mode", "xbm/trainer/run.py",
     "self.model.backbone.eval()  # frozen", "self.model.backbone.train()  # frozen",
     ["tests/xbm/trainer/test_trainer.py::test_warmup_trains_the_head_alone_with_the_backbone_frozen_in_eval_mode"]),
    ("every trial failed exits 0", "tune/results/record.py",
     'return 0 if counts.get("completed", 0) + counts.get("stopped_early", 0) > 0 else 1', "return 0",
     ["tests/tune/test_cli.py::test_sweep_exits_1_only_when_every_trial_failed"]),
    ("fifo stops early", "tune/search/schedulers.py",
     "    return GuardedFIFO()", "    return RecordingASHA({}, time_attr=TIME_ATTR, max_t=max_epochs)",
     ["tests/tune/driver/test_sweep.py::test_every_registry_entry_builds"]),
    ("grace check removed", "tune/driver/plan.py",
     "raise SweepInputError(f\"--grace-period must be <= the epoch budget", "print(f\"--grace-period must be <= the epoch budget",
     ["tests/tune/driver/test_sweep.py::test_bad_input_is_refused_before_anything_is_written"]),
]
names = sys.argv[1:]
unknown = set(names) - {p[0] for p in PLANTS}
if unknown:
    sys.exit(f"bugs must be among {[p[0] for p in PLANTS]}, but got {sorted(unknown)}")
scratch = pathlib.Path(tempfile.mkdtemp(prefix="xbm-planted-"))
for part in ("xbm", "tune", "analysis", "search_spaces", "tests", "pyproject.toml"):
    (shutil.copytree if (REPO / part).is_dir() else shutil.copy2)(REPO / part, scratch / part)
os.chdir(scratch)
missed = 0
for name, path, old, new, tests in PLANTS:
    if names and name not in names:
        continue
    p = pathlib.Path(path)
    text = p.read_text()
    assert text.count(old) == 1, (name, text.count(old))
    p.write_text(text.replace(old, new))
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ".", "OMP_NUM_THREADS": "1"})
        last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-300:]
        print(f"{'CAUGHT' if r.returncode == 1 else 'MISSED' if r.returncode == 0 else f'rc={r.returncode}'}: {name}: {last}", flush=True)
        missed += r.returncode != 1
    finally:
        p.write_text(text)
shutil.rmtree(scratch)
sys.exit(1 if missed else 0)
