"""Sweeps on S3-compatible storage, against moto's S3 server on 127.0.0.1 (started here, credentials
enforced): the sweep's Parquet and checkpoints go to the bucket, a killed driver is resumed with
``xbm-tune resume s3://...``, and ``analysis.load``, ``xbm-tune status`` and ``xbm-tune report`` read it
there. The endpoint and keys come only from AWS_ENDPOINT_URL / AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY,
as a user would set them. A missing bucket or rejected keys are one error (exit 2) before anything runs."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pyarrow.fs as pafs
import pytest

from tune.cli import main

pytest.importorskip("moto.server", reason="moto[server] (the dev extra) runs the local S3 server")
boto3 = pytest.importorskip("boto3", reason="moto[server] installs boto3")

BUCKET = "xbm-sweeps"
EVERYTHING = json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """moto's server with authentication on: one IAM user whose keys may do everything, and BUCKET."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.2)
        # the next 3 requests are unauthenticated (they create the user), every later one is checked
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset-auth", data=b"3", method="POST",
                                                      headers={"Content-Type": "text/plain"})).close()
        anonymous = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
        iam = boto3.client("iam", **anonymous)
        iam.create_user(UserName="sweeper")
        key = iam.create_access_key(UserName="sweeper")["AccessKey"]
        iam.put_user_policy(UserName="sweeper", PolicyName="everything", PolicyDocument=EVERYTHING)
        env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
               "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"], "AWS_DEFAULT_REGION": "us-east-1"}
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"]).create_bucket(Bucket=BUCKET)
        yield env
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module", autouse=True)
def s3_env(s3_server):
    """The server's endpoint and keys in the environment, before the module's Ray starts (its workers
    inherit them, as workers on a cluster get them from their node's environment)."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in s3_server.items():
            patch.setenv(name, value)
        yield s3_server


def _keys(prefix: str) -> list[str]:
    fs, _ = pafs.FileSystem.from_uri(f"s3://{BUCKET}")
    infos = fs.get_file_info(pafs.FileSelector(f"{BUCKET}/{prefix}", recursive=True, allow_not_found=True))
    return [i.path[len(BUCKET) + 1:] for i in infos if i.type == pafs.FileType.File]


@pytest.mark.parametrize("storage, env, expected", [
    ("s3://no-such-bucket/sweeps", {}, "bucket 'no-such-bucket' of s3://no-such-bucket/sweeps does not exist"),
    (f"s3://{BUCKET}/bad-secret", {"AWS_SECRET_ACCESS_KEY": "wrong"}, f"cannot access bucket '{BUCKET}'"),
    (f"s3://{BUCKET}/bad-key", {"AWS_ACCESS_KEY_ID": "AKIANOSUCHKEY0000000"}, f"cannot access bucket '{BUCKET}'"),
])
def test_missing_bucket_or_rejected_keys_exit_2_before_anything_runs(
        storage, env, expected, toy_space, monkeypatch, capsys):
    """Bug caught: a missing bucket or bad keys surfacing only after Ray started (pyarrow answers
    "not found" for any key of a missing bucket, so the name check passed), as a traceback, or with
    objects already written; the message names the bucket, the endpoint and the variables to check."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code = main(["sweep", str(toy_space), "--storage", storage, "--name", "x", "--no-dashboard"])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and err.count("error:") == 1
    assert os.environ["AWS_ENDPOINT_URL"] in err
    if env:
        assert "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY" in err
        assert main(["resume", f"{storage}/x", "--no-dashboard"]) == 2
        assert main(["status", f"{storage}/x"]) == 2
        assert "cannot access bucket" in capsys.readouterr().err
    monkeypatch.undo()  # the good keys again, to look: nothing was written, no bucket was created
    bucket, prefix = storage[len("s3://"):].split("/", 1)
    if bucket == BUCKET:
        assert _keys(prefix) == []
    else:
        fs, _ = pafs.FileSystem.from_uri(f"s3://{BUCKET}")
        assert fs.get_file_info(bucket).type == pafs.FileType.NotFound


@pytest.mark.slow
def test_sweep_on_s3_killed_resumed_loaded_reported(ray_session, killed_driver, capsys):
    """Bug caught: any part of the sweep (Parquet, sweep.json, Tune's state, checkpoints) written to a
    local folder instead of the bucket, a resume from a bucket losing or duplicating epoch rows, or the
    readers (analysis.load, status, report) assuming a local path."""
    import ray

    import analysis

    uri = f"s3://{BUCKET}/sweeps/drv"
    # a snapshot a second, not the folder test's 0.3 s: one upload of the staging folder to moto (about 60
    # requests) takes longer than 0.3 s, so they ran back to back and moto's server took 134 CPU-s of a CI-like
    # run (66 CPU-s alone; 42 at 1 s). S3 epochs were not timed one by one: the killed driver's 6 epochs and 2
    # actor starts took 43 s, so a snapshot a second still lands within an epoch there.
    killed = killed_driver(ray.get_runtime_context().gcs_address, f"s3://{BUCKET}/sweeps", snapshot_s=1.0)
    assert killed.uri == uri
    assert main(["resume", uri, "--no-dashboard"]) == 0
    killed.assert_finished_once(analysis.load(uri).trials)

    keys = _keys("sweeps/drv")
    assert "sweeps/drv/results/sweep.json" in keys and any(k.startswith("sweeps/drv/experiment_state") for k in keys)
    assert "sweeps/drv/state-backup.zip" not in keys  # an object appears whole: no backup (state_backup.py)
    for trial_id in killed.before.index:  # each trial's last checkpoint is in the bucket
        assert any(trial_id in k and "/checkpoint_" in k for k in keys), trial_id

    sweep = analysis.load(uri)
    assert len(sweep.trials) == 3 and len(sweep.epochs) == 12
    assert main(["status", uri]) == 0
    out = capsys.readouterr().out
    assert "3 trial(s)" in out and out.count("completed") >= 3
    assert main(["report", uri]) == 0
    assert f"report: {uri}/report.md" in capsys.readouterr().out
    assert "sweeps/drv/report.md" in _keys("sweeps/drv")
