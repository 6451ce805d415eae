"""Install what this Python lacks from a wheelhouse (``scripts/gpu_wheels.sh``), for ``scripts/gpu_check.sh``.

    python scripts/install_wheels.py WHEELS_DIR TARGET     # then PYTHONPATH=TARGET:...

A wheel is installed (``pip install --no-index --no-deps --target TARGET``) when its distribution is not
importable here or is older than the wheel: an air-gapped image keeps what it has (torch, numpy, ...) and
gets the rest, e.g. a typing-extensions new enough for pydantic. Run it again with TARGET on PYTHONPATH
and it installs nothing. Prints one line per wheel; exit status 1 when pip fails.
"""
from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.utils import parse_wheel_filename
from packaging.version import Version


def needed(wheel: Path) -> tuple[bool, str]:
    """Whether ``wheel`` must be installed, and why (its distribution's installed version, or none)."""
    name, version, _, _ = parse_wheel_filename(wheel.name)
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        return True, f"{name} {version}: not installed"
    if Version(have) < version:
        return True, f"{name} {version}: {have} installed is older"
    return False, f"{name}: {have} installed"


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    wheels, target = Path(sys.argv[1]), Path(sys.argv[2])
    found = sorted(wheels.glob("*.whl"))
    if not found:
        print(f"no wheels in {wheels} (write them with scripts/gpu_wheels.sh {wheels})", file=sys.stderr)
        return 1
    install = []
    for wheel in found:
        missing, why = needed(wheel)
        print(f"  {'install' if missing else 'keep   '} {why}")
        if missing:
            install.append(str(wheel))
    if install:
        command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--upgrade",
                   "--target", str(target), *install]
        if subprocess.run(command).returncode != 0:
            return 1
    print(f"installed {len(install)} of {len(found)} wheels into {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
