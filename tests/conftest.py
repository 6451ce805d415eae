"""Every test leaves torch's process-wide settings as it found them.

A test that changes one (CUDA's sync debug mode, deterministic algorithms, TF32, cuDNN's flags, the thread
count, the default dtype or device, grad mode, an entered dispatch mode) and does not put it back poisons
every later test of its process: a pytest-xdist worker runs hundreds. The first GPU run showed it: a CUDA test
left the sync debug mode at "error" and later tests in its worker failed far from the cause. The autouse
fixture below reads every setting of :data:`SETTINGS` before and after each test; a test that changed one
gets a teardown error naming the setting and its two values, and the setting is put back so that the next
tests run as they would alone.

Under pytest-xdist (``make test`` runs two workers), :func:`pytest_configure` also gives each worker's torch its
share of the CPUs and, in the controller, writes Ray's token before the workers start (:func:`ray_token_written`);
:func:`pytest_collection_modifyitems` puts the modules with slow tests first, for ``make test``'s scheduling.

This file must stay self-contained (no imports from the project's tests): tests/test_conftest.py runs a copy
of it in a fresh pytest on planted leaks.
"""
from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import torch


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker's torch gets its share of the CPUs (at least one thread), not all of them.

    torch starts one intra-op thread per core in every process: ``-n 16`` on a 16-core machine ran 256 threads
    that spin on 16 cores. Measured on the GPU machine (H100 host, 16 cores): 16 processes of a small training
    loop finished in 0.55 s with one thread each and not within 150 s with 16 each; the first GPU run of the
    suite (``-n 16``) was cut at 45 % with the longest CPU trainer tests failing. Runs without xdist keep
    torch's default. The share is the baseline the guard below compares each test with."""
    # xdist's own marks, not its PYTEST_XDIST_* variables: a pytest started inside a worker (tests/test_conftest.py
    # runs some) inherits those and would take itself for a worker
    if hasattr(config, "workerinput"):
        from joblib import cpu_count   # the affinity mask and a cgroup CPU quota, as xbm.runtime.cpus counts them

        torch.set_num_threads(max(1, cpu_count() // int(config.workerinput["workercount"])))
    elif getattr(config.option, "numprocesses", None):   # pytest-xdist's controller, before it starts the workers
        ray_token_written(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules holding a ``slow`` test run first, each module's tests kept together and in their order.

    ``make test`` hands whole modules to its two pytest-xdist workers in this order (``--dist loadscope
    --no-loadscope-reorder``): the end-to-end modules (one took 10 minutes on a busy CI machine) start while the
    other worker can still fill the time with the hundreds of short modules, instead of one of them running last
    on one worker while the other waits (about 340 s of a 63-minute run, 2026-11-28)."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)   # stable: the files' order within each group


def ray_token_written(config: pytest.Config) -> None:
    """Writes Ray's token (``~/.ray/auth_token``) once, before pytest-xdist starts its workers, where none is yet.

    Ray 2.60's first local ``ray.init()`` on a machine generates the key of its token authentication and writes
    it there; every process of that Ray (the workers it starts for trials, later) reads the file. Two xdist
    workers starting their first Ray at once can each write their own key, and the cluster whose key was
    overwritten then rejects its own new processes. ``ray get-auth-token --generate`` is Ray's command for it. A
    command that fails is a warning, not a stop: the tests that start no Ray (a GPU check's CUDA tests) still run."""
    if importlib.util.find_spec("ray") is None or (Path.home() / ".ray" / "auth_token").exists():
        return
    try:   # output captured: the key stays off the logs
        run = subprocess.run([sys.executable, "-c", "from ray.scripts.scripts import main; main()", "get-auth-token",
                              "--generate"], capture_output=True, text=True, timeout=120)
        failure = run.returncode and f"exit status {run.returncode}: {run.stderr.strip()[-500:]}"
    except (OSError, subprocess.SubprocessError) as error:
        failure = str(error)
    if failure:
        config.issue_config_time_warning(pytest.PytestConfigWarning(
            f"`ray get-auth-token --generate` failed ({failure}); two workers starting their first Ray at once may "
            "each write ~/.ray/auth_token: run that command once by hand"), stacklevel=2)


@dataclass(frozen=True)
class Setting:
    """One process-wide torch setting: how to read it and how to put a read value back."""

    name: str
    get: Callable[[], Any]
    set: Callable[[Any], None]


class Raised:
    """The value of a setting whose getter raised (e.g. ``torch.get_float32_matmul_precision()`` after a mix
    of the legacy and the newer per-backend precision APIs): equal to another of the same message."""

    def __init__(self, error: Exception) -> None:
        self.text = f"raises {type(error).__name__}: {str(error)[:120].strip()}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Raised) and other.text == self.text

    def __repr__(self) -> str:
        return self.text


def _read(setting: Setting) -> Any:
    try:
        return setting.get()
    except Exception as error:   # noqa: BLE001 - a raising getter is a state worth reporting, not a crash
        return Raised(error)


def _attribute(owner: Any, name: str, label: str) -> Setting:
    return Setting(label, lambda: getattr(owner, name), lambda value: setattr(owner, name, value))


def _deterministic() -> tuple[bool, bool]:
    return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()


def _pop_modes(length: Callable[[], int], pop: Callable[[], Any]) -> Callable[[int], None]:
    def restore(before: int) -> None:
        while length() > before:
            pop()
    return restore


def _settings() -> list[Setting]:
    backends = torch.backends
    settings = []
    # Read through torch._C: torch.cuda.get_sync_debug_mode() initialises CUDA first (it raises without a
    # driver, and on a GPU machine initialising CUDA in every test would change what later tests see, e.g.
    # xbm.training.rng saves CUDA generator states only once CUDA is initialised). The flag is the same one.
    if hasattr(torch._C, "_cuda_get_sync_debug_mode"):
        settings.append(Setting("torch.cuda sync debug mode (0 default, 1 warn, 2 error)",
                                torch._C._cuda_get_sync_debug_mode, torch._C._cuda_set_sync_debug_mode))
    settings += [
        Setting("torch deterministic algorithms (enabled, warn_only)", _deterministic,
                lambda value: torch.use_deterministic_algorithms(value[0], warn_only=value[1])),
        # The legacy getters, which the project reads (inductor too); put back through the legacy setters, which
        # also clear a mix with the newer per-backend ``fp32_precision`` flags (after which the getters raise).
        Setting("torch.get_float32_matmul_precision()", torch.get_float32_matmul_precision,
                torch.set_float32_matmul_precision),
        _attribute(backends.cuda.matmul, "allow_tf32", "torch.backends.cuda.matmul.allow_tf32"),
        _attribute(backends.cuda.matmul, "allow_fp16_reduced_precision_reduction",
                   "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction"),
        _attribute(backends.cuda.matmul, "allow_bf16_reduced_precision_reduction",
                   "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction"),
        *(_attribute(backends.cudnn, name, f"torch.backends.cudnn.{name}")
          for name in ("enabled", "benchmark", "deterministic", "allow_tf32")),
        _attribute(backends.mkldnn, "enabled", "torch.backends.mkldnn.enabled"),
        Setting("torch.get_num_threads()", torch.get_num_threads, torch.set_num_threads),
        Setting("torch.get_default_dtype()", torch.get_default_dtype, torch.set_default_dtype),
        # None, not "cpu": set_default_device("cpu") enters a device mode, which the plain default has not
        Setting("torch.get_default_device()", torch.get_default_device,
                lambda device: torch.set_default_device(None if device == torch.device("cpu") else device)),
        Setting("torch.is_grad_enabled()", torch.is_grad_enabled, torch.set_grad_enabled),
        Setting("torch.is_anomaly_enabled()", torch.is_anomaly_enabled, torch.set_anomaly_enabled),
    ]
    # Modes entered and never exited (a TorchDispatchMode counting ops, say): every later op runs through them.
    stacks = {"dispatch": lambda: torch._C._pop_torch_dispatch_stack(None),  # None: the user modes' stack
              "function": lambda: torch._C._pop_torch_function_stack()}
    for kind, pop in stacks.items():
        length = getattr(torch._C, f"_len_torch_{kind}_stack", None)
        if length is not None:
            settings.append(Setting(f"torch {kind} modes entered", length, _pop_modes(length, pop)))
    return settings


SETTINGS = _settings()


def changes(before: dict[str, Any]) -> list[str]:
    """``"name: <before> before the test, <after> after"`` for each setting that differs from ``before``."""
    after = {s.name: _read(s) for s in SETTINGS}
    return [f"{name}: {before[name]!r} before the test, {after[name]!r} after" for name in before
            if after[name] != before[name]]


def restore(before: dict[str, Any]) -> None:
    for setting in SETTINGS:
        value = before[setting.name]
        if _read(setting) != value and not isinstance(value, Raised):
            setting.set(value)


@pytest.fixture(autouse=True)
def _torch_settings_unchanged():
    """Fails (at teardown) a test that leaves any of :data:`SETTINGS` changed, and puts them back."""
    before = {s.name: _read(s) for s in SETTINGS}
    yield
    changed = changes(before)
    if changed:
        restore(before)
        pytest.fail("the test left torch's process-wide settings changed (put back now):\n  " + "\n  ".join(changed),
                    pytrace=False)


# What xbm.runtime.device.configure_cuda sets for the whole process when a CUDA runtime is built: a training
# process wants them for its life, a test must not leave them to the next (TF32 in a later test's GPU matmuls).
CUDA_RUN_SETTINGS = ("torch.get_float32_matmul_precision()", "torch.backends.cudnn.benchmark",
                     "torch.backends.cudnn.allow_tf32")


@contextlib.contextmanager
def cuda_run_settings_kept() -> Iterator[None]:
    """Builds of a CUDA runtime inside may change :data:`CUDA_RUN_SETTINGS`: they are put back on the way out
    (and nothing else is, so the guard still sees any other leak)."""
    chosen = [s for s in SETTINGS if s.name in CUDA_RUN_SETTINGS]
    before = {s.name: _read(s) for s in chosen}
    try:
        yield
    finally:
        for setting in chosen:
            if _read(setting) != before[setting.name]:
                setting.set(before[setting.name])


@pytest.fixture
def cuda_run_settings_restored():
    """For a test that builds a CUDA runtime (a CUDA Trainer, ``Runtime.from_config("cuda", ...)``, device auto on
    a GPU machine): :func:`cuda_run_settings_kept` around the whole test."""
    with cuda_run_settings_kept():
        yield
