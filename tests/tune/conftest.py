"""Shared fixtures of the tune tests: one local Ray per test process, shared by the modules that ask for it,
a toy search-space file, and a sweep driver killed halfway (for the resume tests on a folder and on a bucket)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[2]

TOY_SPACE = """
description: end-to-end test space (toy data; thesis protocol and XBM paper Fig. 1 ratio in miniature)
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 2, warmup_epochs: 0, batch_size: 16,
       samples_per_class: 4, val_fraction: 0.2, device: cpu}
params:
  normaliser.kind: {choice: [none, xbn]}
  memory.ratio: {loguniform: [0.1, 1.0]}
"""


def run_toy_sweep(root: Path, name: str, space: str, **options: Any):
    """Write ``space`` under ``root``, run its sweep to the end (storage ``root/sweeps``, no dashboard) and
    return ``(plan, built)`` (``built.searcher`` for the Optuna checks)."""
    from tune.driver.options import SweepOptions
    from tune.driver.plan import prepare
    from tune.driver.sweep import start

    (root / "toy.yaml").write_text(space)
    plan = prepare(str(root / "toy.yaml"), SweepOptions(storage=str(root / "sweeps"), name=name, dashboard=False,
                                                        **options))
    built = start(plan)
    built.tuner.fit()
    return plan, built


# One local Ray per test process, shared by every module that asks for ``ray_session`` (a Ray start and its
# shutdown cost 10-20 s on a busy 2-core machine: once per module, they were about 400 s of a CI run's 21 modules).
# It has one CPU, so a sweep runs one trial at a time on one actor that Tune reuses (reuse_actors): a second
# trial at once costs a second actor, whose imports (torch, Ray Tune, the trainer) take 12-15 s of CPU, and ran
# no sooner on 2 cores that the other test process keeps busy. A test that needs trials at once gives them
# fractional CPUs (PBT, PB2) or starts its own Ray. With one CPU, an actor or placement group that a failed test
# leaves behind would hold it and every later sweep would wait forever (a full run hung so, 2026-11-28): before
# each test, a shared Ray whose CPU is not free within CPU_FREE_S is replaced by a new one, with a warning that
# names the test before it.
# The hooks below start it before a test that asks for it and stop it before the first test of a module that
# does not (such a module sees no Ray, as when each module had its own). Only this Ray is stopped by them: one that
# a module's own fixture starts (8 CPUs, a two-node cluster) is that fixture's to stop, and a test that asks for
# ``ray_session`` after one is left up gets the shared Ray instead (the old fixture would have failed there).
_SHARED: dict[str, Any] = {"gcs": None, "modules": set(), "last": None}
CPU_FREE_S = 20.0  # a finished sweep's actors and placement groups are released in a second or two


def _shared_is_up() -> bool:
    import ray

    return ray.is_initialized() and ray.get_runtime_context().gcs_address == _SHARED["gcs"]


def _cpus_held(wait_s: float) -> float:
    """The shared Ray's CPUs still held after waiting up to ``wait_s`` for them to be released."""
    import ray

    deadline = time.monotonic() + wait_s
    while True:
        held = ray.cluster_resources().get("CPU", 0.0) - ray.available_resources().get("CPU", 0.0)
        if held <= 0 or time.monotonic() > deadline:
            return held
        time.sleep(0.2)


def _start_shared() -> None:
    import ray

    if _shared_is_up():
        held = _cpus_held(CPU_FREE_S)
        if held <= 0:
            return
        warnings.warn(f"the shared test Ray still had {held:g} CPU held {CPU_FREE_S:g} s after {_SHARED['last']} "
                      "(an actor or placement group left behind): replaced by a new Ray", stacklevel=1)
    ray.shutdown()
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    _SHARED["gcs"] = ray.get_runtime_context().gcs_address


def _stop_shared() -> None:
    if _SHARED["gcs"] is not None and "ray" in sys.modules and _shared_is_up():
        sys.modules["ray"].shutdown()
    _SHARED["gcs"] = None


def pytest_collection_modifyitems(items) -> None:
    """Note the modules with a test asking for ``ray_session``: Ray stays up through each of those."""
    _SHARED["modules"] = {item.path for item in items if "ray_session" in item.fixturenames}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item) -> None:
    if "ray_session" in item.fixturenames:
        _start_shared()
    elif item.path not in _SHARED["modules"]:
        _stop_shared()


def pytest_runtest_teardown(item, nextitem) -> None:
    if "ray_session" in item.fixturenames:  # the guard's warning names the last test that used the shared Ray
        _SHARED["last"] = item.nodeid
    # the next test is outside tests/tune (these hooks do not run for it): no idle Ray under the rest of the run
    if nextitem is None or Path(__file__).parent not in nextitem.path.parents:
        _stop_shared()


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray with 1 CPU and no dashboard, up for this test (the hooks above start it; it is shared by
    every module of this process that asks for it)."""
    yield


@pytest.fixture
def ray_down():
    """No Ray in this process during the test, for tests that check a command never starts (or leaves) one.
    The next test that asks for ``ray_session`` starts the shared one again."""
    import ray

    ray.shutdown()
    yield
    ray.shutdown()


@pytest.fixture
def toy_space(tmp_path):
    """Path of a two-parameter toy space file: a few seconds per trial on CPU."""
    path = tmp_path / "toy.yaml"
    path.write_text(TOY_SPACE)
    return path


# ---- a sweep driver killed halfway (tests/tune/test_faults.py on a local folder, test_s3.py on a bucket) ----
# Batches of 4 (2 classes x 2): ~640 steps, an epoch of 0.5-0.8 s since issue 18 (over a second before). At batch 32
# (0.3 s epochs) polls that read every epoch file back from the S3 server missed the kill point (a trial at
# exactly 2 of 4 epochs), and epochs shorter than TUNE_GLOBAL_CHECKPOINT_S void what KEEP_CHECKPOINTS relies on
# (tune/driver/sweep.py): the snapshot may then name a checkpoint already deleted (the driver below sets 0.3 s).
RESUME_SPACE = """description: resume
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 4, warmup_epochs: 0, batch_size: 4,
       samples_per_class: 2, lr: 1.0e-3}
params:
  seed: {grid: [0, 1, 2]}
"""


@dataclass
class KilledDriver:
    """What a sweep folder held when its driver was killed: trials.parquet, a completed trial and the bytes
    of its epoch file, and a trial halfway through (2 or 3 of 4 epochs) with its first epoch row."""

    uri: str  # the sweep folder, <storage>/drv
    fs: Any
    results: str  # the results folder's path inside fs
    before: Any
    finished: str
    finished_rows: bytes
    halfway: str
    first_epoch: Any

    def tear_state(self) -> str:
        """Truncate the sweep's experiment state to 0 bytes, as a driver killed while Tune copied it to the
        storage left it (seen in CI); the file's name."""
        folder = self.results.rsplit("/", 1)[0]
        [name] = [info.base_name for info in self.fs.get_file_info(pafs.FileSelector(folder))
                  if info.base_name.startswith("experiment_state-")]
        self.fs.open_output_stream(f"{folder}/{name}").close()
        return name

    def assert_finished_once(self, trials) -> None:
        """After ``resume``: 3 trials completed, 4 epochs each, none repeated or lost, the completed trial
        not run again and the halfway one continued from its checkpoint."""
        trials = trials.set_index("trial_id")
        assert len(trials) == 3 and (trials.status == "completed").all()
        assert set(self.before.index) <= set(trials.index)
        epochs = pq.read_table(f"{self.results}/epochs", filesystem=self.fs).to_pandas()
        assert len(epochs) == 12 and not epochs.duplicated(["trial_id", "epoch"]).any()
        assert sorted(epochs.groupby("trial_id").epoch.apply(list).tolist()) == [[1, 2, 3, 4]] * 3
        with self.fs.open_input_stream(f"{self.results}/epochs/{self.finished}.parquet") as stream:
            assert stream.readall() == self.finished_rows  # not run again
        # the interrupted trial continued from its checkpoint: its first epoch was not trained again
        again = epochs[(epochs.trial_id == self.halfway) & (epochs.epoch == 1)].iloc[0]
        assert again.epoch_time_s == self.first_epoch.epoch_time_s and again.loss == self.first_epoch.loss


@pytest.fixture
def killed_driver(tmp_path):
    """A function ``(address, storage, snapshot_s=0.3) -> KilledDriver``: runs ``xbm-tune sweep`` of RESUME_SPACE
    (3 trials x 4 epochs, one at a time, an experiment snapshot every ``snapshot_s``) as a driver process joining
    the test's Ray at ``address`` into ``<storage>/drv`` (a folder or a bucket URI), and kills it (SIGKILL) once
    trials.parquet shows a completed trial and another trial's epoch file holds 2 rows (a checkpoint every epoch,
    ``--checkpoint-period 0``, so both its checkpoints are kept, whichever the last uploaded experiment snapshot
    names: see KEEP_CHECKPOINTS in tune/driver/sweep.py)."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    def run(address: str, storage: str, snapshot_s: float = 0.3) -> KilledDriver:
        (tmp_path / "resume.yaml").write_text(RESUME_SPACE)
        # experiment snapshots every 0.3 s: shorter than an epoch (0.5-0.8 s at batch 4 since issue 18's
        # step without host waits), so the snapshot names each checkpoint before the next replaces it; on a
        # bucket a longer ``snapshot_s`` (test_s3.py)
        env = {**os.environ, "TUNE_GLOBAL_CHECKPOINT_S": str(snapshot_s), "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(REPO)}
        argv = [sys.executable, "-m", "tune.cli", "sweep", str(tmp_path / "resume.yaml"), "--search", "grid",
                "--num-samples", "1", "--scheduler", "fifo", "--max-concurrent", "1", "--storage", storage,
                "--name", "drv", "--address", address, "--no-dashboard", "--checkpoint-period", "0",
                "--no-stop-collapsed"]  # the toy MLP starts below raw pixels: every trial must run its epochs
        log = tmp_path / "driver.log"
        with open(log, "w") as out:
            driver = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        uri = f"{storage.rstrip('/')}/drv"
        fs, root = pafs.FileSystem.from_uri(uri if "://" in uri else f"file://{uri}")
        results = f"{root}/results"

        def read(path: str):  # as the project's readers do: again if it raced a replacement
            for attempt in range(5):
                with fs.open_input_stream(path) as stream:
                    data = stream.readall()
                try:
                    return pq.read_table(pa.BufferReader(data))
                except pa.ArrowInvalid:
                    if attempt == 4:
                        raise
                    time.sleep(0.1)

        def trials():
            return read(f"{results}/trials.parquet").to_pandas().set_index("trial_id")

        def halfway(rows) -> list[str]:  # epoch files are written at every epoch, trials.parquet every 2 s
            files = fs.get_file_info(pafs.FileSelector(f"{results}/epochs", allow_not_found=True))
            return [f.base_name[:-len(".parquet")] for f in files if f.base_name.endswith(".parquet")
                    and read(f.path).num_rows in rows]

        def ready() -> bool:
            if fs.get_file_info(f"{results}/trials.parquet").type == pafs.FileType.NotFound:
                return False
            return (trials().status == "completed").sum() >= 1 and bool(halfway((2,)))

        deadline = time.time() + 240
        while not ready():
            if driver.poll() is not None or time.time() > deadline:
                driver.kill()
                raise AssertionError(f"driver ended or timed out before the kill point:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        before = trials()
        finished = before.index[before.status == "completed"][0]
        with fs.open_input_stream(f"{results}/epochs/{finished}.parquet") as stream:
            finished_rows = stream.readall()
        # (it may have reported its last epoch between the check and the kill)
        middle = (halfway((2, 3)) or [t for t in halfway((4,)) if t not in before.index[before.status == "completed"]])[0]
        first = read(f"{results}/epochs/{middle}.parquet").to_pandas().iloc[0]
        return KilledDriver(uri, fs, results, before, finished, finished_rows, middle, first)

    return run
