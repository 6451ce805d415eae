"""The shared Ray of the tune tests (tests/tune/conftest.py): up for each test that asks for ``ray_session``, down
for a module that does not, whatever ran before.

A copy of that conftest runs in a fresh pytest (a subprocess: its Rays never touch this one) over planted modules,
in file order."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ASKS = '''
import ray


def test_first_gets_ray(ray_session):
    assert ray.is_initialized()


def test_then_a_test_that_takes_it_down(ray_down):
    assert not ray.is_initialized()


def test_gets_it_back(ray_session):
    assert ray.is_initialized()
    with open("gcs.txt", "a") as out:
        out.write(ray.get_runtime_context().gcs_address + "\\n")
'''
# a module whose own fixture starts a Ray, as the 8-CPU and the two-node ones do: a shared Ray left up makes
# its ray.init fail ("called ray.init twice")
OWN = '''
import ray


def test_sees_no_ray_and_starts_its_own():
    assert not ray.is_initialized()
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    ray.shutdown()
'''
AGAIN = '''
import ray
from ray.util import placement_group

import conftest

conftest.CPU_FREE_S = 2.0  # how long the guard waits for a held CPU (20 s in the suite)
LEFT = []


def test_one_ray_serves_two_modules(ray_session):
    with open("gcs.txt") as written:
        assert written.read().split()[-1] == ray.get_runtime_context().gcs_address   # test_a's, not a new one


def test_leaves_the_only_cpu_held(ray_session):
    LEFT.append(placement_group([{"CPU": 1}]))   # as a failed test's trial can leave it
    assert LEFT[0].wait(timeout_seconds=60)


def test_without_ray_in_between():   # the guard's warning must still name the test before, which held the CPU
    assert ray.is_initialized()   # the module asks for ray_session: the shared Ray stays up through this test


def test_a_later_test_gets_the_cpu(ray_session):
    assert placement_group([{"CPU": 1}]).wait(timeout_seconds=30)
'''


@pytest.mark.slow
def test_the_shared_ray_is_up_where_asked_and_down_in_a_module_that_does_not_ask(tmp_path):
    """Bugs caught: the shared Ray left up into a module that starts its own (its ``ray.init`` fails), a test
    that asks for ``ray_session`` after a ``ray_down`` test finding no Ray, a Ray started again for each
    module (the per-module start this replaced), or the one CPU left held by an earlier test (every later
    sweep then waits forever: the guard replaces that Ray and says so, naming the last test that used it, not
    a test without Ray run in between)."""
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    # four Ray starts: a's first, a's after its ray_down, b's replacement of the held one, c's own
    for name, text in (("test_a_asks.py", ASKS), ("test_b_again.py", AGAIN), ("test_c_own.py", OWN)):
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "--rootdir", str(tmp_path), str(tmp_path)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "8 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
    assert run.stdout.count("replaced by a new Ray") == 1   # only after the test that left the CPU held
    assert "held 2 s after test_b_again.py::test_leaves_the_only_cpu_held" in run.stdout
