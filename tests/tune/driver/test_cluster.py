"""tune/driver/cluster.py and sweeps on a local two-node Ray cluster (ray.cluster_utils.Cluster): trials land on
both nodes and the Parquet is complete; with fake GPUs (num_gpus=2, gpus_per_trial=0.5) four trials run
at once, each seeing the GPU id Ray assigned it."""
from __future__ import annotations

import logging
from collections import Counter

import pyarrow.parquet as pq
import pytest
import ray
from ray.cluster_utils import Cluster
from ray.tune import Callback

from tune.driver.cluster import ClusterInfo, connect, disconnect
from tune.driver.options import SweepOptions
from tune.driver.plan import prepare
from tune.driver.sweep import start
from tune.results.record import outcome

SPACE = """description: cluster
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 2, warmup_epochs: 0, batch_size: 128}
params:
  seed: {grid: [0, 1, 2, 3]}
"""


def test_dashboard_line_tells_how_to_log_in():
    info = ClusterInfo(address="127.0.0.1:6379", dashboard_url="127.0.0.1:8265", token_auth=True, started=True,
                       nodes=1, cpus=2, gpus=0)
    text = info.describe()
    assert "Dashboard: http://127.0.0.1:8265" in text and "ray get-auth-token" in text
    assert "ssh -L 8265:127.0.0.1:8265" in text and "~/.ray/auth_token" in text
    assert "ray get-auth-token" not in ClusterInfo("a", "127.0.0.1:8265", False, True, 1, 2, 0).describe()


def test_ray_session_logs_where_it_runs_and_disconnects_even_on_an_error(monkeypatch, caplog):
    """Bug caught: a command that fails mid-fit leaving the Ray it started running (the next command then
    joins a stale session), or a session that does not say where it runs; one context manager, not three
    copies of connect / print / disconnect. Where it runs is an INFO record of ``tune.driver.cluster`` (was: a print
    that ``--quiet`` and a notebook could not silence)."""
    from tune.driver import cluster

    info = ClusterInfo("127.0.0.1:6379", None, False, True, 1, 2, 0)
    events = []
    monkeypatch.setattr(cluster, "connect", lambda address, dashboard, **kw: events.append(("connect", address, kw))
                        or info)
    monkeypatch.setattr(cluster, "disconnect", lambda got: events.append(("disconnect", got)))
    caplog.set_level(logging.INFO, logger="tune.driver.cluster")
    with pytest.raises(RuntimeError, match="fit failed"):
        with cluster.ray_session("auto", False, num_cpus=2) as got:
            assert got is info
            raise RuntimeError("fit failed")
    assert events == [("connect", "auto", {"num_cpus": 2}), ("disconnect", info)]
    assert [(r.name, r.levelno) for r in caplog.records] == [("tune.driver.cluster", logging.INFO)]
    assert "Ray: local Ray, 1 node(s), 2 CPU(s), 0 GPU(s)" in caplog.records[0].getMessage()


def test_without_an_address_a_sweep_starts_its_own_ray_not_the_one_a_stale_file_names(monkeypatch):
    """Bug caught: ray.init() without an address joins whatever /tmp/ray/ray_current_cluster names (a cluster
    killed without `ray stop` leaves it): the sweep retried the dead address for minutes, silently. A Ray job's
    driver (RAY_ADDRESS set) still joins its cluster."""
    from tune.driver import cluster

    calls = []

    def init(**kwargs):
        calls.append(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(cluster.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(cluster.ray, "init", init)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for address, env in ((None, None), (None, "10.0.0.1:6379"), ("auto", None)):
        if env:
            monkeypatch.setenv("RAY_ADDRESS", env)
        with pytest.raises(RuntimeError, match="stop here"):
            connect(address, dashboard=False)
    assert [c.get("address") for c in calls] == ["local", None, "auto"]


def test_every_ray_init_in_the_repository_names_its_address():
    """Bug caught: a ``ray.init(num_cpus=2)`` (two test fixtures and a benchmark had one) joins the cluster that
    /tmp/ray/ray_current_cluster names: under ``make test``'s two xdist workers, the other worker's ``Cluster``
    above while it runs (a fixture error, "num_cpus ... must not be provided", or trials on the wrong cluster);
    on a user's machine a ``ray start`` cluster. ``address="local"`` starts a new one whatever the file says."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    bare = []
    for folder in ("xbm", "tune", "analysis", "benchmarks", "scripts", "tests"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "init"
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "ray"
                        and not node.args and "address" not in {k.arg for k in node.keywords}
                        and None not in {k.arg for k in node.keywords}):  # **options: tested above
                    bare.append(f"{path.relative_to(root)}:{node.lineno}")
    assert bare == [], f"ray.init without address=: {bare}"


class MostAtOnce(Callback):
    """The largest number of trials RUNNING at the same time."""

    def __init__(self) -> None:
        self.most = 0

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.most = max(self.most, sum(t.status == "RUNNING" for t in trials))


@pytest.fixture(scope="module")
def cluster():
    # head: 2 CPUs; worker: 2 CPUs and 2 (fake) GPUs. Two processes per node are cheap on 2 cores.
    local = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    worker = local.add_node(num_cpus=2, num_gpus=2)
    ray.init(address=local.address, log_to_driver=False)
    local.wait_for_nodes()
    yield local, worker
    ray.shutdown()
    local.shutdown()


def run(tmp_path, name: str, **options):
    (tmp_path / "space.yaml").write_text(SPACE)
    plan = prepare(str(tmp_path / "space.yaml"), SweepOptions(
        search="grid", scheduler="fifo", num_samples=1, storage=str(tmp_path / "out"), name=name,
        dashboard=False, **{"stop_collapsed": False, **options}))  # the toy MLP starts below raw pixels
    watch = MostAtOnce()
    start(plan, callbacks=(watch,)).tuner.fit()
    return plan, outcome(plan.experiment_uri, "recall_at_1", "max").trials, watch.most


@pytest.mark.slow
def test_trials_land_on_both_nodes_and_the_parquet_is_complete(cluster, tmp_path):
    info = connect(address=None, dashboard=False)  # an existing connection is reused, not restarted
    assert info.nodes == 2 and info.cpus == 4 and not info.started
    disconnect(info)
    assert ray.is_initialized()
    # 2 CPUs per trial: one trial fits on each node, so the two nodes run them
    plan, trials, _ = run(tmp_path, "nodes", cpus_per_trial=2)
    assert len(trials) == 4 and (trials.status == "completed").all()
    assert trials.node_id.nunique() == 2
    assert set(trials.node_id) == {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    epochs = pq.read_table(f"{plan.results_uri}/epochs").to_pandas()
    assert len(epochs) == 8 and not epochs.duplicated(["trial_id", "epoch"]).any()


@pytest.mark.slow
def test_fractional_gpus_run_four_trials_at_once_each_on_its_gpu(cluster, tmp_path):
    _, worker = cluster
    plan, trials, most = run(tmp_path, "gpus", cpus_per_trial=0.5, gpus_per_trial=0.5)
    assert most == 4
    assert (trials.status == "completed").all() and set(trials.node_id) == {worker.node_id}
    assert Counter(trials.gpu_ids) == {"0": 2, "1": 2}
    assert trials.gpu_hours.gt(0).all()


@pytest.mark.slow
def test_auto_cpus_follow_the_gpu_nodes_and_are_recorded(cluster, tmp_path):
    """Bug caught: --cpus-per-trial auto reaching Ray unresolved (a crash at the first trial), resolved from
    the whole cluster (the GPU-less head's CPUs counted), or sweep.json recording 'auto' instead of the number
    the trials ran with."""
    from analysis.contract import SweepRecord
    from tune.driver.sweep import resolved_resources

    # the GPU node: 2 CPUs, 2 GPUs; a whole GPU brings 1 CPU, half a GPU still 1 (never 0)
    assert resolved_resources(SweepOptions(gpus_per_trial=1.0)).cpus_per_trial == 1.0
    assert resolved_resources(SweepOptions(gpus_per_trial=0.5)).cpus_per_trial == 1.0
    assert resolved_resources(SweepOptions()).cpus_per_trial == 1.0  # no GPUs asked
    plan, trials, _ = run(tmp_path, "auto", gpus_per_trial=1.0)
    assert (trials.status == "completed").all()
    record = SweepRecord.from_dict(__import__("json").loads(open(f"{plan.results_uri}/sweep.json").read()))
    assert record.options["cpus_per_trial"] == 1.0


@pytest.mark.slow
def test_a_gpu_hour_budget_stops_the_trials_on_fake_gpus(cluster, tmp_path):
    """Bug caught: GPU hours counted without the trials' GPUs (a GPU budget never spent), counted only after
    a trial's result was stored (the trials then reach their last epoch and complete), or a spent budget
    missing from trials.parquet's stop_reason."""
    plan, trials, _ = run(tmp_path, "gpu-budget", cpus_per_trial=0.5, gpus_per_trial=0.5, gpu_hours_budget=1e-6,
                          stop_collapsed=False)
    assert trials.stop_reason.str.startswith("budget: the GPU-hour budget (1e-06 h").all()
    assert (trials.status == "stopped_early").all() and trials.epochs_completed.max() == 1
    assert trials.gpu_hours.sum() >= 1e-6
