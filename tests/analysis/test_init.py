"""The package reads Parquet only: importing all of it (report included) loads no Ray, tune or torch."""
import subprocess
import sys

import analysis


def test_public_names():
    assert all(hasattr(analysis, name) for name in analysis.__all__)
    assert callable(analysis.load) and callable(analysis.param_importance)


def test_no_ray_tune_or_torch():
    code = ("import sys, analysis, analysis.report, analysis.plots\n"
            "bad = sorted(m for m in ('ray', 'tune', 'torch', 'xbm') if m in sys.modules)\n"
            "lazy = sorted(m for m in ('matplotlib', 'optuna', 'scipy.stats') if m in sys.modules)\n"
            "print(bad, lazy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] []"
