"""tune/commands/submit.py and ``xbm-tune submit``: the job's arguments, and a real submission to a local
``ray start --head`` (token authentication on) listed under the sweep's name."""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tune.cli import main
from tune.commands.submit import job_argv

ROOT = Path(__file__).resolve().parents[3]


def test_job_argv_forwards_the_sweep_flags_and_joins_the_cluster():
    """Bug caught: the dashboard URL forwarded as the job's GCS --address (the job could not connect),
    a value-less flag eating the next argument, or the job's sweep name differing from the job id."""
    argv = ["quickstart", "--address", "http://h:8265", "--num-samples", "3", "--no-dashboard",
            "--set", "dataset=toy", "--address=http://h:8265", "--smoke-test"]
    assert job_argv(argv, "qs-1") == ["sweep", "quickstart", "--num-samples", "3", "--set", "dataset=toy",
                                      "--smoke-test", "--name", "qs-1", "--address", "auto"]


def test_bad_sweep_input_exits_2_before_contacting_any_cluster(capsys):
    """Bug caught: a typo reaches the cluster as a failing job instead of exiting 2 here."""
    assert main(["submit", "quickstart", "--set", "lrr=0.1", "--address", "http://127.0.0.1:1"]) == 2
    assert "lrr" in capsys.readouterr().err


def _scripts_module(name: str):
    """A module of scripts/ (not a package), loaded from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def head(monkeypatch, tmp_path_factory):
    """A local ``ray start --head`` with token auth on free ports and its own temp folder (so no other Ray
    on this machine finds or joins it), killed by process group at the end: never ``ray stop``, which
    stops every Ray of the machine. (scripts/screenshots.py ``ray_head``.)"""
    token = secrets.token_hex(16)
    work = Path(tempfile.mkdtemp(prefix="xr", dir="/tmp"))  # short: Ray's unix sockets live under it
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "PYTHONPATH": str(ROOT),
           "PATH": f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}", "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN", token)
    try:
        with _scripts_module("screenshots").ray_head(work, env) as url:
            yield url
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.slow
def test_submit_runs_the_sweep_as_a_job_named_after_it(head, tmp_path, capsys, monkeypatch):
    """Bugs caught: the job id is not the sweep's name (the Jobs page would list a random id), the
    token is not sent (401), the printed follow command is wrong, the job's driver log lacks Tune's
    progress table, or the job does not produce the sweep's Parquet."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    storage = tmp_path / "sweeps"

    def submit(*args, token: str | None = None):
        # a fresh process: Ray loads the auth token once per process, and an earlier test's ray.init in this
        # one would have loaded another cluster's token. A head that does not answer is retried for 60 s.
        env = {**os.environ, "PYTHONPATH": str(ROOT), **({"RAY_AUTH_TOKEN": token} if token else {})}
        run = subprocess.run([sys.executable, "-m", "tune.cli", "submit", "quickstart", "--smoke-test", *args,
                              "--address", head], env=env, capture_output=True, text=True, timeout=300)
        return run.returncode, run.stdout, run.stderr

    code, out, err = submit("--storage", str(storage), "--name", "sub-1")
    assert code == 0 and "submitted job sub-1" in out, err
    assert f"ray job logs -f --address {head} sub-1" in out
    # the head's token, sent explicitly: Ray caches a process's token state at first use (see submit above)
    client = JobSubmissionClient(head, headers={"Authorization": f"Bearer {os.environ['RAY_AUTH_TOKEN']}"})
    deadline = time.monotonic() + 300
    while client.get_job_status("sub-1") not in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
        assert time.monotonic() < deadline, "the job did not finish in 300 s"
        time.sleep(2)
    logs = client.get_job_logs("sub-1")
    assert client.get_job_status("sub-1") == JobStatus.SUCCEEDED, logs[-3000:]
    assert [j.submission_id for j in client.list_jobs()] == ["sub-1"]
    assert "Trial status" in logs and "[xbm] trial" in logs  # Tune's table and the trials' lines
    assert (storage / "sub-1" / "results" / "trials.parquet").exists()
    # a name already used on the cluster is refused before a second job starts
    code, out, err = submit("--storage", str(tmp_path / "other"), "--name", "sub-1")
    assert code == 2 and "already exists" in err, (code, out[-1000:], err[-2000:])
    # a wrong token (a fresh process: Ray loads the token once per process): one clear error, exit 2
    code, out, err = submit("--storage", str(tmp_path / "x"), token="0" * 32)
    assert code == 2 and "refused the token" in err, (code, out[-1000:], err[-2000:])
    assert [j.submission_id for j in client.list_jobs()] == ["sub-1"]  # neither reached the cluster


def test_the_printed_job_commands_send_the_token_when_auth_is_on():
    """Bug caught: the `ray job logs/status/stop` lines printed after a submit failed with 'Missing
    authentication token' on a token-auth cluster: `ray job` sends the stored token only under
    RAY_AUTH_MODE=token."""
    from tune.commands.submit import follow_help

    on, off = follow_help("s1", "http://h:8265", True), follow_help("s1", "http://h:8265")
    assert "  status:  RAY_AUTH_MODE=token ray job status --address http://h:8265 s1" in on
    assert "  stop:    ray job stop --address http://h:8265 s1" in off and "RAY_AUTH_MODE" not in off


def test_the_log_flags_given_before_submit_reach_the_jobs_command_line():
    """Bug caught (issue 55): ``xbm-tune --quiet submit ...`` running a job that is not quiet (the flags before
    ``submit`` were dropped with the command's name)."""
    from tune.commands.submit import job_entrypoint

    assert job_entrypoint(["quickstart"], "qs-1", ["--quiet"]) == (
        "xbm-tune --quiet sweep quickstart --name qs-1 --address auto")
    assert job_entrypoint(["quickstart"], "qs-1") == "xbm-tune sweep quickstart --name qs-1 --address auto"


def test_submit_splits_the_log_flags_from_the_sweeps(monkeypatch, tmp_path, capsys):
    """Bug caught: the flags before ``submit`` forwarded as sweep flags (the job's sweep refuses --quiet), or the
    sweep's flags cut at the wrong place."""
    import tune.commands.submit as submit

    sent = []
    monkeypatch.setattr(submit, "submit", lambda argv, name, address, global_flags=(): sent.append(
        (list(argv), list(global_flags))) or name)
    monkeypatch.setattr(submit, "enable_token_auth_if_available", lambda: False)
    assert main(["-q", "submit", "quickstart", "--storage", str(tmp_path), "--address", "http://127.0.0.1:1"]) == 0
    assert sent == [(["quickstart", "--storage", str(tmp_path), "--address", "http://127.0.0.1:1"], ["-q"])]
    assert "results (on the cluster's storage)" in capsys.readouterr().out
