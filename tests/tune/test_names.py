"""``tune`` means this project's package in every module: Ray's is imported as ``ray_tune``."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RAY_TUNE_AS_TUNE = re.compile(r"^\s*(from ray import tune\s*$|from ray import tune\s*(#|,)|import ray\.tune as tune\b)",
                              re.M)


def test_no_module_binds_tune_to_rays():
    """Bug caught: a module where ``tune.report`` is Ray's while ``from tune import live`` beside it is ours (as
    tune/trial/trainable.py had): a reader, and a monkeypatch of ``module.tune``, cannot tell which is meant."""
    offenders = [str(path.relative_to(ROOT)) for folder in ("tune", "xbm", "analysis", "tests", "benchmarks", "scripts")
                 for path in (ROOT / folder).rglob("*.py") if RAY_TUNE_AS_TUNE.search(path.read_text())]
    assert offenders == [], f"import Ray's tune as ray_tune: {offenders}"


def test_the_check_sees_each_way_of_binding_it():
    """The check can fail: each spelling that binds ``tune`` to Ray's is seen, the aliased import is not."""
    for text in ("from ray import tune\n", "    from ray import tune  # lazily\n", "import ray.tune as tune\n"):
        assert RAY_TUNE_AS_TUNE.search(text), text
    assert not RAY_TUNE_AS_TUNE.search("from ray import tune as ray_tune\n")
