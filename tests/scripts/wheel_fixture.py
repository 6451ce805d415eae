"""A tiny pure-Python wheel, built by hand, for the tests of the wheelhouse scripts (no registry)."""
from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def make_wheel(folder: Path, name: str, version: str) -> Path:
    """``<name>-<version>-py3-none-any.whl`` in ``folder``: module ``<name>`` with ``VERSION = "<version>"``."""
    info = f"{name}-{version}.dist-info"
    files = {f"{name}.py": f'VERSION = "{version}"\n',
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join(record + [f"{info}/RECORD,,"]) + "\n"
    wheel = Path(folder) / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as out:
        for path, text in files.items():
            out.writestr(path, text)
    return wheel
