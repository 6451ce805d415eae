"""``--log wandb``: online only with a key and a connection, offline (nothing sent) otherwise; offline runs in
the sweep's folder with their sync command."""
from __future__ import annotations

import socket

import pytest

import tune.results.wandb_logger as wl
from tune.errors import SweepInputError


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """No WANDB_* variable and an empty .netrc: a machine where `wandb login` was never run."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    return tmp_path / "netrc"


def _refuse_probe(url, timeout_s=wl.PROBE_TIMEOUT_S):
    raise AssertionError(f"probed {url} without a key")


def test_without_a_key_runs_offline_and_probes_nothing(no_credentials, monkeypatch):
    """Bug caught: a sweep on a machine without W&B credentials trying to go online (Ray's callback raises
    'No WandB API key found', or wandb blocks on a login prompt), or reaching the network to find out."""
    monkeypatch.setattr(wl, "reachable", _refuse_probe)
    assert wl.wandb_mode() == "offline"


@pytest.mark.parametrize("answers, mode", [(True, "online"), (False, "offline")])
def test_with_a_key_the_mode_follows_the_connection(no_credentials, monkeypatch, answers, mode):
    """Bug caught: a key taken for a connection (a laptop on a plane with WANDB_API_KEY set would hang on
    W&B's retries), or the probe aimed at W&B's host when WANDB_BASE_URL names the user's own server."""
    probed = []
    monkeypatch.setattr(wl, "reachable", lambda url, timeout_s=3.0: probed.append(url) or answers)
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")
    assert wl.wandb_mode() == mode and probed == ["https://wandb.example.org"]


def test_a_wandb_login_counts_as_a_key_and_an_explicit_mode_wins(no_credentials, monkeypatch):
    """Bugs caught: only WANDB_API_KEY looked at (a user who ran `wandb login`, which writes .netrc, would be
    forced offline), or WANDB_MODE=disabled/offline overridden by the automatic choice."""
    no_credentials.write_text(f"machine api.wandb.ai\n  login user\n  password {'b' * 40}\n")
    no_credentials.chmod(0o600)
    assert wl.has_key(wl.DEFAULT_HOST) and not wl.has_key("https://wandb.example.org")
    monkeypatch.setattr(wl, "reachable", lambda url, timeout_s=3.0: True)
    assert wl.wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wl.wandb_mode() == "disabled"


def test_reachable_opens_a_connection_or_says_no():
    """Bug caught: a probe that answers True without connecting (every keyed machine online) or that raises
    on a refused connection instead of answering False. Loopback only: nothing leaves the machine."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        assert wl.reachable(f"http://127.0.0.1:{port}", timeout_s=2.0)
    finally:
        server.close()
    assert not wl.reachable(f"http://127.0.0.1:{port}", timeout_s=2.0)


def test_offline_runs_go_to_the_sweep_folder_and_a_bucket_is_refused(no_credentials, monkeypatch, tmp_path):
    """Bugs caught: offline runs left in the working directory's ./wandb (mixed across sweeps, lost on a
    cluster), no sync command printed, or offline files aimed at a bucket, where W&B cannot write."""
    monkeypatch.setattr(wl, "reachable", _refuse_probe)
    callback = wl.build_wandb(str(tmp_path / "sweeps"), "exp")
    assert callback.kwargs == {"mode": "offline", "dir": str(tmp_path / "sweeps" / "exp")}
    assert callback.project == wl.DEFAULT_PROJECT and callback.group == "exp"
    folder = tmp_path / "sweeps" / "exp" / "wandb"
    assert callback.closing() == f"W&B runs are offline; upload them with: wandb sync {folder}/offline-run-*"
    with pytest.raises(SweepInputError, match="local --storage"):
        wl.build_wandb("s3://bucket/sweeps", "exp")
    # bug caught: a file:// storage taken as local but joined as given, a folder named 'file:' in the cwd
    assert wl.build_wandb(f"file://{tmp_path}/sweeps", "exp").kwargs["dir"] == str(tmp_path / "sweeps" / "exp")


def test_a_run_that_fails_is_named_when_the_sweep_ends(no_credentials, monkeypatch, tmp_path):
    """Bug caught: a trial's W&B run failing silently. Ray's logging actor ends with the error in a future that
    nothing reads (wandb.init timing out on a loaded machine: no run in W&B, nothing said), so the user finds
    a trial missing from W&B with no reason. Its error is kept and the sweep's closing lines name it."""
    monkeypatch.setattr(wl, "reachable", _refuse_probe)
    callback = wl.build_wandb(str(tmp_path / "sweeps"), "exp")
    assert callback._logger_actor_cls is wl.SweepWandbActor  # what Ray starts for each trial

    class TimesOut:
        def init(self, *args, **kwargs):
            raise TimeoutError("Run initialization has timed out after 90.0 sec.")

    trial_dir = tmp_path / "trial"
    trial_dir.mkdir()
    monkeypatch.chdir(tmp_path)  # the actor moves into the trial's folder
    actor = wl.SweepWandbActor(str(trial_dir), queue=None, exclude=[], to_config=[], id="ce881_00001",
                               **callback.kwargs)
    actor._wandb = TimesOut()
    with pytest.raises(TimeoutError):  # the actor still fails, as Ray's does
        actor.run()
    assert callback.failures() == {"ce881_00001": "TimeoutError: Run initialization has timed out after 90.0 sec."}
    warning, sync = callback.closing().splitlines()
    assert warning == ("warning: W&B logging failed for 1 trial(s), whose epochs are in the Parquet files only: "
                       "ce881_00001: TimeoutError: Run initialization has timed out after 90.0 sec.")
    assert sync.startswith("W&B runs are offline; upload them with: wandb sync ")
