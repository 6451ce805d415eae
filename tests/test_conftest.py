"""The guard on torch's process-wide settings (tests/conftest.py): it fails a test that leaks one and puts it back.

A copy of the conftest runs in a fresh pytest (a subprocess, so that the planted leaks never touch this one)
over planted tests, run in file order: each leaking test must get a teardown error naming the setting and both
values, and the test after it must see the setting as it was before the leak."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PLANTED = '''
import pytest
import torch

START = {}


def test_records_the_start():
    START.update(benchmark=torch.backends.cudnn.benchmark, threads=torch.get_num_threads(),
                 precision=torch.get_float32_matmul_precision())


def test_leaks_cudnn_benchmark():
    torch.backends.cudnn.benchmark = not START["benchmark"]


def test_sees_cudnn_benchmark_put_back():
    assert torch.backends.cudnn.benchmark == START["benchmark"]


def test_leaks_the_sync_debug_mode():
    torch._C._cuda_set_sync_debug_mode(2)   # "error", as the CUDA sync test's wrapper left it


def test_sees_the_sync_debug_mode_put_back():
    assert torch._C._cuda_get_sync_debug_mode() == 0


def test_fails_and_leaks_the_thread_count():
    torch.set_num_threads(START["threads"] + 1)
    assert False, "planted failure"


def test_sees_the_thread_count_put_back():
    assert torch.get_num_threads() == START["threads"]


def test_mixes_the_precision_apis():
    torch.backends.cuda.matmul.fp32_precision = "tf32"   # the newer flag: the legacy getter then raises


def test_sees_the_precision_put_back():
    assert torch.get_float32_matmul_precision() == START["precision"]


def test_leaves_a_mode_entered():
    from torch.utils._python_dispatch import TorchDispatchMode
    TorchDispatchMode().__enter__()


def test_sees_no_mode_entered():
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    assert _get_current_dispatch_mode_stack() == []


def test_changes_and_restores():
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.use_deterministic_algorithms(False)
'''


def fresh_pytest(folder: Path, tests: str, *options: str, env=None) -> subprocess.CompletedProcess:
    """A fresh pytest (a subprocess) over ``tests`` (``folder/test_planted.py``) beside a copy of the conftest."""
    (folder / "conftest.py").write_text((Path(__file__).parent / "conftest.py").read_text())
    (folder / "test_planted.py").write_text(tests)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, str(folder)],
                          cwd=folder, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.slow
def test_the_guard_fails_each_leaking_test_and_puts_the_setting_back(tmp_path):
    """Bugs caught: a test leaving CUDA's sync debug mode at "error" (the first GPU run: every later CUDA test of
    that xdist worker failed), cuDNN's benchmark flag, the thread count or a dispatch mode changed for the rest of
    the process; the guard missing a leak, not naming it, not putting it back (the next test still poisoned),
    or failing a test that changed a setting and put it back itself."""
    run = fresh_pytest(tmp_path, PLANTED, "-rfE", "-p", "no:xdist", "-p", "no:randomly")
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    errors = sorted(line.split("::")[1].split(" ")[0] for line in out.splitlines() if line.startswith("ERROR "))
    assert errors == sorted(["test_leaks_cudnn_benchmark", "test_leaks_the_sync_debug_mode",
                             "test_fails_and_leaks_the_thread_count", "test_mixes_the_precision_apis",
                             "test_leaves_a_mode_entered"]), out
    failed = [line.split("::")[1].split(" ")[0] for line in out.splitlines() if line.startswith("FAILED ")]
    assert failed == ["test_fails_and_leaks_the_thread_count"], out   # its own failure, besides the leak
    assert "torch.backends.cudnn.benchmark: False before the test, True after" in out, out
    assert "torch.cuda sync debug mode (0 default, 1 warn, 2 error): 0 before the test, 2 after" in out, out
    threads = re.search(r"torch.get_num_threads\(\): (\d+) before the test, (\d+) after", out)
    assert threads and int(threads[2]) == int(threads[1]) + 1, out
    assert "torch.get_float32_matmul_precision(): 'highest' before the test, raises RuntimeError" in out, out
    assert "torch dispatch modes entered: 0 before the test, 1 after" in out, out
    assert "1 failed, 11 passed" in out and "5 errors" in out, out   # the "sees ... put back" tests passed


@pytest.mark.slow
def test_each_xdist_worker_runs_torch_on_its_share_of_the_cpus(tmp_path):
    """Bug caught: every pytest-xdist worker running torch with one thread per core (``-n 16`` on 16 cores: 256
    spinning threads, a small training loop 270 times slower or worse on the GPU machine, the longest CPU trainer
    tests of the first GPU run failing)."""
    from joblib import cpu_count

    share = max(1, cpu_count() // 2)
    share_test = f"import torch\n\n\ndef test_share():\n    assert torch.get_num_threads() == {share}\n"
    run = fresh_pytest(tmp_path, share_test, "-n", "2")
    assert run.returncode == 0, run.stdout + run.stderr


NOTHING = "def test_nothing():\n    pass\n"


@pytest.mark.slow
def test_under_xdist_rays_token_is_written_before_the_workers_start(tmp_path):
    """Bug caught: two xdist workers each starting the machine's first local Ray at once (a fresh CI machine runs
    ``make test`` with two): each writes its own key to ~/.ray/auth_token and the cluster whose key was overwritten
    rejects the worker processes it starts later. The controller writes it first (HOME here: an empty folder), also
    when it inherits xdist's variables (in make test it took itself for a worker and wrote nothing)."""
    home = tmp_path / "home"
    home.mkdir()
    # xdist's variables set, as in a pytest started inside an xdist worker (make test's): still the controller
    env = {**os.environ, "HOME": str(home), "PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "2"}
    run = fresh_pytest(tmp_path, NOTHING, "-n", "2", env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    token = (home / ".ray" / "auth_token").read_text()
    assert len(token) >= 32 and token not in run.stdout + run.stderr   # Ray's key, kept off the output


@pytest.mark.slow
def test_a_failing_ray_token_command_warns_and_the_tests_still_run(tmp_path):
    """Bug caught: the token's command failing (a GPU image whose Ray cannot start its CLI) stopping pytest before
    any test, the GPU check's CUDA tests with it. A stand-in ``ray`` package whose command exits 3."""
    scripts = tmp_path / "fake" / "ray" / "scripts"
    scripts.mkdir(parents=True)
    for folder in (scripts.parent, scripts):
        (folder / "__init__.py").write_text("")
    (scripts / "scripts.py").write_text("import sys\n\n\ndef main():\n    sys.exit(3)\n")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env.update(HOME=str(home), PYTHONPATH=os.pathsep.join([str(tmp_path / "fake"), *sys.path]))
    run = fresh_pytest(tmp_path, NOTHING, "-n", "2", env=env)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "1 passed" in out, out
    assert "`ray get-auth-token --generate` failed (exit status 3" in out, out
    assert not (home / ".ray" / "auth_token").exists()
