"""The dependencies (pyproject.toml's [tool.deptry]), checked by deptry: every package the code imports is declared,
every runtime dependency is imported, no runtime module imports a dev-only package; and each check shown to fail
on a planted import or declaration, so that none passes vacuously.

Two scans: the packages and benchmarks/ with [tool.deptry] as it stands (the dev and viewers extras are dev
groups there); scripts/ and tests/, which run in the dev environment, with every extra counting as installed
(``SECOND``: DEP002, an unused dependency, is the first scan's to judge)."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(importlib.util.find_spec("deptry") is None,
                                reason="deptry is not installed here (the dev extra has it: scripts/setup.sh)")

FIRST_PARTY = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["deptry"]["known_first_party"]
SECOND = ["scripts", "tests", "--exclude", r"(.*/)?__pycache__",
          "--extend-exclude", r"(.*/)?\.pytest_cache",  # in place of [tool.deptry]'s, which leaves scripts/ out
          "--optional-dependencies-dev-groups", "none",  # no group is dev-only: every extra counts as declared
          "--ignore", "DEP002",
          *(arg for name in [*FIRST_PARTY, "tests"] for arg in ("--known-first-party", name))]


def deptry(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "deptry", *(args or ["."]), "--config", "pyproject.toml",
                           "--no-ansi"], cwd=root, capture_output=True, text=True, timeout=300)


def findings(run: subprocess.CompletedProcess) -> str:
    return "\n".join(line for line in (run.stdout + run.stderr).splitlines() if not line.startswith("Assuming"))


def test_the_packages_and_benchmarks_declare_what_they_import_and_import_what_they_declare():
    """Bug caught: an import of a package the project does not declare (one that only arrives through another,
    as scipy, Pillow and safetensors did), or a runtime dependency nothing imports any more."""
    run = deptry(ROOT)
    assert run.returncode == 0, findings(run)[-4000:]
    assert "No dependency issues found" in run.stdout + run.stderr


def test_scripts_and_tests_import_only_declared_packages():
    """Bug caught: a script or a test importing a package that no extra declares, so that a fresh set-up
    (scripts/setup.sh) lacks it."""
    run = deptry(ROOT, *SECOND)
    assert run.returncode == 0, findings(run)[-4000:]
    assert "No dependency issues found" in run.stdout + run.stderr


@pytest.fixture
def copy(tmp_path) -> Path:
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for folder in ("xbm", "tune", "analysis", "benchmarks", "scripts"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "tests").mkdir()
    return tmp_path


def plant(path: Path, line: str) -> None:
    text = path.read_text()
    future = "from __future__ import annotations\n"
    assert future in text  # the planted line goes after it, where an import is legal
    path.write_text(text.replace(future, f"{future}{line}\n", 1))


def declare(root: Path, old: str, new: str) -> None:
    text = (root / "pyproject.toml").read_text()
    assert text.count(old) == 1, old
    (root / "pyproject.toml").write_text(text.replace(old, new))


# name -> (what is planted, the codes that may report it, the name reported). sympy arrives with torch: DEP003 where
# it is installed, DEP001 where it is not (deptry run outside the project's environment).
PLANTED = {
    "undeclared import": (lambda r: plant(r / "xbm/memory/ring.py", "import sympy"), ("DEP001", "DEP003"), "'sympy'"),
    "undeclared import in a lazy import": (lambda r: plant(r / "analysis/compare.py", "def _f():\n    import sympy"),
                                           ("DEP001", "DEP003"), "'sympy'"),
    "a declaration dropped": (lambda r: declare(r, '    "scipy>=1.17",', ""), ("DEP001", "DEP003"), "'scipy'"),
    "an unused dependency": (lambda r: declare(r, '    "numpy>=2.4",', '    "numpy>=2.4",\n    "six>=1.16",'),
                             ("DEP002",), "'six'"),
    "a viewer imported by the code": (lambda r: plant(r / "tune/driver/sweep.py", "import tensorboard"), ("DEP004",),
                                      "'tensorboard'"),
    "a dev package imported by the code": (lambda r: plant(r / "tune/cli.py", "import polars"), ("DEP004",),
                                           "'polars'"),
}


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_each_check_fails_on_a_planted_mistake(copy, case):
    """Bug caught: a configuration that passes whatever the code imports (a known_first_party or per-rule ignore
    too broad, a dependency group read as dev when it is not, a check turned off)."""
    make, codes, name = PLANTED[case]
    assert deptry(copy).returncode == 0  # the copy is clean before the plant
    make(copy)
    run = deptry(copy)
    out = findings(run)
    assert run.returncode == 1, out[-3000:]
    assert any(f"{code} {name}" in out for code in codes), out[-3000:]


@pytest.mark.parametrize("folder", ["scripts", "tests"])
def test_the_second_scan_fails_on_a_script_or_test_importing_an_undeclared_package(copy, folder):
    """Bug caught: the scan of scripts/ and tests/ passing whatever they import (scripts/ left out by the first
    scan's extend_exclude)."""
    assert deptry(copy, *SECOND).returncode == 0
    (copy / folder / "planted.py").write_text("import sympy\n")
    run = deptry(copy, *SECOND)
    out = findings(run)
    assert run.returncode == 1 and f"{folder}/planted.py" in out and "'sympy'" in out, out[-3000:]
