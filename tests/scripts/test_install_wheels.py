"""scripts/install_wheels.py: an air-gapped image gets the wheels it lacks, keeps what it has."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

from .wheel_fixture import make_wheel

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("install_wheels", ROOT / "scripts" / "install_wheels.py")
install = importlib.util.module_from_spec(spec)
spec.loader.exec_module(install)


def test_a_wheel_is_installed_when_its_package_is_missing_or_older(tmp_path):
    """Bug caught: ray.tune failed to import on the GPU image, whose typing-extensions predates the Sentinel
    that the carried pydantic-core needs: "installed" must mean "installed and at least as new"."""
    have = importlib.metadata.version("pytest")
    assert install.needed(make_wheel(tmp_path, "xbm_probe_absent", "1.0"))[0]
    assert install.needed(make_wheel(tmp_path, "pytest", "999.0"))[0]
    missing, why = install.needed(make_wheel(tmp_path, "pytest", "1.0"))
    assert not missing and have in why


def test_the_missing_wheels_land_in_the_target_and_a_second_run_installs_nothing(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "xbm_probe", "2.0")
    make_wheel(wheels, "pytest", "1.0")   # older than this Python's: kept
    target = tmp_path / "site"
    run = [sys.executable, str(ROOT / "scripts" / "install_wheels.py"), str(wheels), str(target)]
    first = subprocess.run(run, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    assert "installed 1 of 2 wheels" in first.stdout and (target / "xbm_probe.py").is_file()
    again = subprocess.run(run, capture_output=True, text=True, env={"PYTHONPATH": str(target), "PATH": ""})
    assert again.returncode == 0 and "installed 0 of 2 wheels" in again.stdout, again.stdout + again.stderr
