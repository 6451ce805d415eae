"""The types (pyproject.toml's [tool.mypy]), checked by mypy over xbm, tune and analysis: the torch-free floors
strict, every other module with mypy's default checks, less a baseline of modules whose errors are hidden. Shown to
fail on planted errors, so that the check cannot pass whatever the code says; and the baseline shown to only
shrink."""
from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("xbm", "tune", "analysis")
needs_mypy = pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                                reason="mypy is not installed here (the dev extra has it: scripts/setup.sh)")


def mypy(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    # the cache (.mypy_cache, beside the config) makes a second run take seconds instead of a minute or two
    return subprocess.run([sys.executable, "-m", "mypy", "--no-pretty", "--no-color-output", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900)


def errors_by_module(output: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for path in re.findall(r"^(\S+\.py):\d+: error:", output, flags=re.M):
        module = path[:-3].replace("/", ".").removesuffix(".__init__")
        out[module] = out.get(module, 0) + 1
    return out


def baseline(pyproject: str) -> dict[str, int]:
    """The baseline's modules and their error counts, from their lines (``"xbm.memory",  # 20: why``)."""
    block = pyproject[pyproject.index("# The baseline:"):]
    listed = dict(re.findall(r'^\s+"([\w.]+)",\s+# (\d+): \S', block, flags=re.M))
    assert listed, "no baseline lines found in pyproject.toml"
    return {module: int(count) for module, count in listed.items()}


@needs_mypy
@pytest.mark.slow  # a minute or two without mypy's cache (a fresh clone), seconds with it
def test_the_packages_type_check():
    """Bug caught: a type error in xbm, tune or analysis (a None passed where a value is needed, a wrong
    attribute, a floor's function left without annotations) reaching main."""
    run = mypy(ROOT)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "Success: no issues found" in run.stdout


@needs_mypy
@pytest.mark.slow
def test_the_baseline_only_shrinks(tmp_path):
    """Bug caught: a baseline module whose errors grow unseen (a new error hidden by ignore_errors), or one
    fixed but still listed, whose next errors would then be hidden."""
    text = (ROOT / "pyproject.toml").read_text()
    listed = baseline(text)
    assert text.count("ignore_errors = true") == 1
    config = tmp_path / "pyproject.toml"
    config.write_text(text.replace("ignore_errors = true", "ignore_errors = false"))
    run = mypy(ROOT, "--config-file", str(config), *PACKAGES)
    found = errors_by_module(run.stdout)
    assert set(found) <= set(listed), f"errors outside the baseline: {sorted(set(found) - set(listed))}"
    fixed = sorted(module for module in listed if module not in found)
    assert not fixed, f"no error left in {fixed}: take them off the baseline in pyproject.toml"
    grown = {module: (listed[module], found[module]) for module in listed if found[module] > listed[module]}
    assert not grown, f"errors grew (listed, now) in {grown}: fix the new ones"


@pytest.fixture
def floor(tmp_path) -> Path:
    """A copy of one strict floor (xbm/errors.py, which imports only the standard library) with the config."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    (tmp_path / "xbm").mkdir()
    (tmp_path / "xbm" / "__init__.py").write_text("")
    shutil.copy(ROOT / "xbm" / "errors.py", tmp_path / "xbm" / "errors.py")
    return tmp_path


# what is planted at the end of the floor's copy -> the error code mypy must report
PLANTED = {
    "a wrong return type": ('def planted() -> int:\n    return "text"\n', "return-value"),
    "a function left untyped in a strict floor": ("def planted(value):\n    return value\n", "no-untyped-def"),
    "a type: ignore without its code": ('planted: int = "text"  # type: ignore\n', "ignore-without-code"),
}


@needs_mypy
@pytest.mark.parametrize("case", sorted(PLANTED))
def test_a_planted_type_error_fails_the_check(floor, case):
    """Bug caught: a type checker that no longer fails (the floors' strictness lost, error codes off, the
    config not read)."""
    assert mypy(floor, "xbm/errors.py").returncode == 0  # the copy is clean before the plant
    line, code = PLANTED[case]
    with open(floor / "xbm" / "errors.py", "a") as f:
        f.write("\n\n" + line)
    run = mypy(floor, "xbm/errors.py")
    assert run.returncode == 1 and f"[{code}]" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]


def test_every_type_ignore_names_its_code_and_its_reason():
    """Bug caught: a bare ``# type: ignore`` (it hides every error on its line) or one nobody can judge later."""
    bad = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if "type: ignore" in line and not re.search(r"# type: ignore\[[\w, -]+\]\s+#\s*\S", line):
                    bad.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not bad, "a # type: ignore names its error code and gives its reason after it:\n" + "\n".join(bad)
