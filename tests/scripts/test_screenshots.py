"""scripts/screenshots.py's Ray head: distinct ports, and a start lost to a port race is tried again."""
from __future__ import annotations

import importlib.util
import os
import stat
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("screenshots", ROOT / "scripts" / "screenshots.py")
screenshots = importlib.util.module_from_spec(spec)
spec.loader.exec_module(screenshots)


def test_free_ports_are_distinct():
    """Bug caught (CI, 2026-11-26): ports chosen one socket at a time could repeat, and Ray refused to start
    with gcs_server and dashboard_agent_grpc on one port."""
    ports = screenshots.free_ports(64)
    assert len(set(ports)) == 64


def _fake_ray(tmp_path: Path, fails: int, message: str) -> Path:
    """A ``ray`` that exits 1 printing ``message`` on its first ``fails`` starts, then stays up (blocks),
    marking itself up for the fake dashboard check."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    count = tmp_path / "count"
    ray = bin_dir / "ray"
    ray.write_text(f"""#!{sys.executable}
import pathlib, sys, time
count = pathlib.Path({str(count)!r})
n = int(count.read_text()) if count.exists() else 0
count.write_text(str(n + 1))
if n < {fails}:
    print({message!r}); sys.exit(1)
count.with_name("up").touch()
time.sleep(600)
""")
    ray.chmod(ray.stat().st_mode | stat.S_IEXEC)
    return bin_dir


@pytest.mark.parametrize("fails, started", [(1, True), (3, False)])
def test_a_start_lost_to_a_port_race_is_tried_again(tmp_path, monkeypatch, fails, started):
    """Bug caught: one port taken between choosing and binding failed the whole browser/submit test."""
    bin_dir = _fake_ray(tmp_path, fails, "ValueError: Ray component dashboard_agent_grpc is trying to use a "
                                         "port number 60535 that is used by other components.")
    monkeypatch.setattr(screenshots.sys, "executable", str(bin_dir / "python"))
    monkeypatch.setattr(screenshots, "http_ok", lambda url, headers=None: (tmp_path / "up").exists())
    if started:
        with screenshots.ray_head(tmp_path, dict(os.environ)) as url:
            assert url.startswith("http://127.0.0.1:")
        assert (tmp_path / "count").read_text() == "2"
    else:
        with pytest.raises(RuntimeError, match="port number 60535"):
            with screenshots.ray_head(tmp_path, dict(os.environ)):
                pass
        assert (tmp_path / "count").read_text() == "3"


def test_a_start_failing_for_another_reason_is_not_retried(tmp_path, monkeypatch):
    """Bug caught: retrying every failure would hide a real misconfiguration behind three slow starts."""
    bin_dir = _fake_ray(tmp_path, 1, "ValueError: unknown option --bogus")
    monkeypatch.setattr(screenshots.sys, "executable", str(bin_dir / "python"))
    monkeypatch.setattr(screenshots, "http_ok", lambda url, headers=None: False)
    with pytest.raises(RuntimeError, match="bogus"):
        with screenshots.ray_head(tmp_path, dict(os.environ)):
            pass
    assert (tmp_path / "count").read_text() == "1"
