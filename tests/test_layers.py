"""The layering (pyproject.toml's [tool.importlinter] contracts; picture: docs/ARCHITECTURE.md), checked by
import-linter, and each contract shown to fail on a planted import so that none passes vacuously."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("xbm", "tune", "analysis", "search_spaces")


def lint(root: Path, contract: str | None = None) -> subprocess.CompletedProcess:
    argv = [str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"]
    argv += ["--contract", contract] if contract else []
    return subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(root), "PATH": ""})


def test_every_contract_is_kept():
    """Bug caught: an import across the layers (xbm importing Ray, analysis importing torch, a floor importing
    torch, two modules importing each other, even inside a function) lands unnoticed."""
    run = lint(ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "4 kept, 0 broken" in run.stdout


# contract id -> (file, the import planted at its top)
PLANTED = {
    "xbm-alone": ("xbm/memory/ring.py", "import ray"),
    "analysis-reads-parquet": ("analysis/columns.py", "import xbm.trainer"),
    "torch-free-floors": ("xbm/config.py", "import xbm.data.base"),
    "no-circles": ("tune/results/parquet.py", "import tune.trial.trainable"),
}


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("house")
    shutil.copy(ROOT / "pyproject.toml", root)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.mark.parametrize("contract", sorted(PLANTED))
def test_each_contract_breaks_on_a_planted_import(copy, contract):
    """Bug caught: a contract that names modules which do not exist, or forbids the wrong way round, and so
    passes whatever the code imports."""
    path, line = PLANTED[contract]
    original = (copy / path).read_text()
    future = "from __future__ import annotations\n"
    assert future in original  # the planted line goes after it, where an import is legal
    (copy / path).write_text(original.replace(future, f"{future}{line}\n", 1))
    try:
        run = lint(copy, contract)
    finally:
        (copy / path).write_text(original)
    assert run.returncode == 1 and "0 kept, 1 broken" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]


FLOORS = ("xbm.config", "xbm.checks", "xbm.errors", "xbm.data.inputs", "xbm.evaluate.signals",
          "xbm.data.image_folder",
          "xbm.normalisers.config", "xbm.memory.config", "xbm.losses.config",
          "tune.search.spaces", "tune.driver.options", "tune.errors", "tune.cli", "analysis",
          "analysis.loader", "analysis.report")


def test_the_floors_load_no_torch_when_imported():
    """Bug caught: a package's __init__ (which import-linter does not follow) importing torch, so that the CLI's
    help, a space check or a notebook's analysis pays torch's start-up after all."""
    code = ("import importlib, sys\n"
            f"for name in {FLOORS!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in ('torch', 'ray', 'timm', 'pytorch_metric_learning') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
