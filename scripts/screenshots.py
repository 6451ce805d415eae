"""Prove, in a real browser, that a running sweep shows up where researchers look, and save screenshots.

It starts its own Ray head (``ray start --head --block``, token authentication on, its own ports and temp
folder, stopped by killing its process group: never ``ray stop``, which would stop every Ray on the
machine), submits a quickstart sweep with ``xbm-tune submit``, and, while the sweep runs, starts
TensorBoard and optuna-dashboard on the sweep folder. Headless Chromium (Debian's ``chromium`` driven by
the ``playwright`` package through ``executable_path``; no browser download) then opens:

* the Ray dashboard (logging in with the token as a user does: the page asks, the token is pasted), the
  job's page (listed under the sweep's name; its driver log holds Tune's table and the trials' lines);
* TensorBoard's scalars (one run per trial, named after it);
* optuna-dashboard: the study (named after the sweep) and a running trial's page.

Each page must show the id of a trial running at that moment, and the metric ``recall_at_1`` (on
optuna-dashboard: the history plot names its objective so; the trial page shows the Ray trial id and
the metric per epoch as intermediate values); the script fails otherwise. Screenshots go to ``--out`` (default docs/img), as small PNGs.

    .venv/bin/python scripts/screenshots.py [--out docs/img] [--num-samples 30]
"""
from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
METRIC = "recall_at_1"
VIEWPORT = {"width": 1280, "height": 800}


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free now. The sockets stay bound until all are chosen: one at a time, the kernel
    may hand the same just-closed port out twice (a CI run's Ray got one port for two of its components)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def free_port() -> int:
    return free_ports(1)[0]


@contextmanager
def process(argv: list[str], env: dict | None = None, log: Path | None = None):
    """A child in its own process group, killed (group-wide) on exit."""
    out = open(log, "w") if log else subprocess.DEVNULL
    proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        # `ray start --head --block` had not ended 30 s after SIGTERM (each test using a head waited all of it);
        # its processes share the group, so SIGKILL after 5 s leaves none behind (checked with ps)
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        if log:
            out.close()


@contextmanager
def ray_head(work: Path, env: dict, num_cpus: int = 2, tries: int = 3):
    """``ray start --head --block`` on free ports with its temp folder under ``work`` (so no other Ray on
    this machine finds or joins it, and no port clashes with one), killed by process group on exit.
    Yields the dashboard URL once its job API answers. A port taken by another process between choosing
    and binding makes Ray exit at once; that start is tried again on fresh ports, ``tries`` times in all."""
    for attempt in range(1, tries + 1):
        with ExitStack() as stack:
            url = stack.enter_context(_ray_head_or_none(work, env, num_cpus, last=attempt == tries))
            if url is not None:
                yield url
                return


@contextmanager
def _ray_head_or_none(work: Path, env: dict, num_cpus: int, last: bool):
    flags = ("--port", "--dashboard-port", "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port",
             "--runtime-env-agent-port", "--metrics-export-port", "--ray-client-server-port")
    ports = dict(zip(flags, free_ports(len(flags))))
    argv = [os.path.join(os.path.dirname(sys.executable), "ray"), "start", "--head", "--block",
            *[f"{flag}={port}" for flag, port in ports.items()], "--dashboard-host=127.0.0.1",
            f"--num-cpus={num_cpus}", "--num-gpus=0", f"--temp-dir={work / 'ray'}", "--include-dashboard=true"]
    url = f"http://127.0.0.1:{ports['--dashboard-port']}"
    headers = {"Authorization": f"Bearer {env['RAY_AUTH_TOKEN']}"} if env.get("RAY_AUTH_TOKEN") else {}
    # a busy machine starts the dashboard slowly; Ray's own wait for it is 60 s
    env = {"RAY_DASHBOARD_STARTUP_TIMEOUT_S": "300", **env}
    log = work / "ray-head.log"
    with process(argv, env, log) as proc:
        wait_until("the Ray dashboard", lambda: proc.poll() is not None or http_ok(f"{url}/api/jobs/", headers), 300)
        if proc.poll() is not None:
            tail = log.read_text()[-3000:]
            if not last and "port" in tail.lower():
                yield None
                return
            raise RuntimeError(f"ray start --head exited with {proc.returncode}:\n{tail}")
        yield url


def wait_until(what: str, check, timeout: float, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"waited {timeout:.0f} s for {what}")


def http_ok(url: str, headers: dict | None = None) -> bool:
    import requests

    try:
        return requests.get(url, headers=headers or {}, timeout=5).ok
    except requests.RequestException:
        return False


def running_trials(sweep: Path) -> set[str]:
    """Ids of the trials trials.parquet lists as running now (the file is replaced atomically)."""
    import pyarrow.parquet as pq

    path = sweep / "results" / "trials.parquet"
    if not path.exists():
        return set()
    # one open file: the sink replaces trials.parquet by rename while we read, and a path read can open
    # the footer of one version and the pages of the next
    with open(path, "rb") as stream:
        table = pq.read_table(stream, columns=["trial_id", "status", "epochs_completed"]).to_pylist()
    return {r["trial_id"] for r in table if r["status"] == "running" and (r["epochs_completed"] or 0) >= 1}


def page_shows_running_trial(page, sweep: Path, timeout: float, metric: bool = True, reload_every: float = 0.0,
                             open_page=None) -> str:
    """Wait until the page's text holds the id of a trial running now (and the metric's name when
    ``metric``); return that id. "Now": running in trials.parquet just before or just after the page's
    text was read (a toy trial lasts seconds). ``open_page(running_ids)`` (re)loads the page each try."""
    last = [time.monotonic()]

    def check():
        before = running_trials(sweep)
        if open_page is not None:
            if not before:
                return None
            open_page(before)
        elif reload_every and time.monotonic() - last[0] > reload_every:
            page.reload()
            last[0] = time.monotonic()
        text = page.inner_text("body")
        if metric and METRIC not in text:
            return None
        shown = [t for t in before | running_trials(sweep) if t in text]
        return shown[0] if shown else None

    return wait_until(f"the page {page.url} to show a running trial's id" + (f" and {METRIC}" if metric else ""),
                      check, timeout, 1.0)


def optuna_numbers(sweep: Path) -> tuple[int, dict[str, int]]:
    """(the study's id, Ray trial id -> Optuna trial number) from the live journal (safe to read while
    the sweep writes: readers replay the append-only log)."""
    import optuna

    sys.path.insert(0, str(ROOT))
    from tune.search.optuna_study import RAY_TRIAL_ID, journal_storage

    study = optuna.load_study(study_name=sweep.name, storage=journal_storage(str(sweep / "results" / "optuna.journal")))
    return study._study_id, {t.user_attrs.get(RAY_TRIAL_ID): t.number for t in study.get_trials(deepcopy=False)}


def shoot(page, path: Path) -> None:
    """A PNG reduced to a 128-colour palette (text stays legible, the file stays small)."""
    from PIL import Image

    page.screenshot(path=str(path))
    Image.open(path).convert("RGB").quantize(colors=128).save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "img"), help="folder for the PNGs")
    parser.add_argument("--num-samples", type=int, default=100, help="trials of the quickstart sweep")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for each page")
    args = parser.parse_args(argv)
    # a SIGTERM (a test's timeout, a CI cancel) unwinds like Ctrl-C, so the children are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not os.path.exists(CHROMIUM):
        print(f"no browser: {CHROMIUM} is missing (apt-get install -y chromium)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="xs", dir="/tmp"))  # short: Ray's unix sockets live under it
    token = secrets.token_hex(16)
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "PYTHONPATH": str(ROOT),
           "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
    env.pop("RAY_ADDRESS", None)
    tb_port, od_port = free_ports(2)
    sweep = work / "sweeps" / "quickstart-live"
    try:
        with ExitStack() as stack:
            ray_url = stack.enter_context(ray_head(work, env))
            submit = subprocess.run(
                [sys.executable, "-m", "tune.cli", "submit", "quickstart", "--num-samples", str(args.num_samples),
                 "--max-concurrent", "2", "--storage", str(work / "sweeps"), "--name", sweep.name,
                 "--address", ray_url], env=env, capture_output=True, text=True)
            print(submit.stdout, submit.stderr, sep="\n")
            if submit.returncode != 0:
                return 1
            wait_until("a running trial with an epoch done", lambda: running_trials(sweep), 300)
            stack.enter_context(process([os.path.join(bin_dir, "tensorboard"), "--logdir", str(sweep / "tensorboard"),
                                         "--host", "127.0.0.1", "--port", str(tb_port), "--reload_interval", "2"],
                                        env, work / "tensorboard.log"))
            stack.enter_context(process([os.path.join(bin_dir, "optuna-dashboard"),
                                         str(sweep / "results" / "optuna.journal"),
                                         "--host", "127.0.0.1", "--port", str(od_port)], env, work / "optuna.log"))
            wait_until("TensorBoard", lambda: http_ok(f"http://127.0.0.1:{tb_port}/"), 120)
            wait_until("optuna-dashboard", lambda: http_ok(f"http://127.0.0.1:{od_port}/"), 120)
            browse(out, sweep, token, ray_url, tb_port, od_port, args.timeout)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def browse(out: Path, sweep: Path, token: str, ray_url: str, tb_port: int, od_port: int, timeout: float) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport=VIEWPORT)
        try:
            visit(page, out, sweep, token, ray_url, tb_port, od_port, timeout)
        except Exception:
            try:  # best effort: the page that failed, for the person reading the error
                page.screenshot(path=str(out / "failed-page.png"), timeout=10_000)
                print(f"failed on {page.url}; its text:\n{page.inner_text('body')[:3000]}", file=sys.stderr)
            except Exception as exc:
                print(f"failed on {page.url} (no screenshot: {exc})", file=sys.stderr)
            raise
        finally:
            browser.close()


def visit(page, out: Path, sweep: Path, token: str, ray_url: str, tb_port: int, od_port: int, timeout: float) -> None:
    # Ray dashboard: the page asks for the token; paste it as a user does
    page.goto(f"{ray_url}/#/jobs")
    from playwright.sync_api import TimeoutError as PageTimeout

    field = page.get_by_role("dialog").locator("input").first
    try:
        field.wait_for(timeout=30_000)
        field.fill(token)
        page.get_by_role("button", name="Submit").click()
    except PageTimeout:  # no dialog: this browser already holds the token's cookie
        pass
    page.get_by_text(sweep.name).first.wait_for(timeout=60_000)  # the Jobs page lists the job by name
    shoot(page, out / "ray-jobs.png")
    # the job's page: its driver log, filtered to the trials' lines, newest first (reloaded per try: the
    # viewer's own Refresh button clears the filter)
    def open_job_log(_running):
        page.goto(f"{ray_url}/#/jobs/{sweep.name}")
        page.reload()
        keyword = page.get_by_label("Keyword")
        keyword.wait_for(timeout=60_000)
        keyword.fill("[xbm] trial")
        keyword.press("Enter")
        page.get_by_text("Reverse").locator("..").locator("input[type=checkbox]").check()
        page.get_by_text("[xbm] trial").first.wait_for(timeout=30_000)

    trial = page_shows_running_trial(page, sweep, timeout, open_page=open_job_log)
    keyword = page.get_by_label("Keyword")
    keyword.evaluate("e => e.scrollIntoView({block: 'start'})")
    shoot(page, out / "ray-job-log.png")
    print(f"Ray dashboard: job {sweep.name}, running trial {trial} shown")

    # TensorBoard lists runs in a scrolled table: filter it to the running trials (a regex of their ids)
    def open_tensorboard(running):
        page.goto(f"http://127.0.0.1:{tb_port}/?tagFilter={METRIC}&runFilter={'|'.join(sorted(running))}#timeseries")
        page.get_by_text(f"ray/tune/{METRIC}").first.wait_for(timeout=30_000)
        time.sleep(2)  # the curves draw after the cards

    trial = page_shows_running_trial(page, sweep, timeout, open_page=open_tensorboard)
    shoot(page, out / "tensorboard.png")
    print(f"TensorBoard: running trial {trial} shown")

    # optuna-dashboard: the study's history (the objective is named after the metric), then a running
    # trial's page (its Ray id is a user attribute; its epochs so far are intermediate values)
    study_id, _ = optuna_numbers(sweep)
    page.goto(f"http://127.0.0.1:{od_port}/dashboard/studies/{study_id}")
    page.get_by_text(METRIC).first.wait_for(timeout=60_000)
    shoot(page, out / "optuna-dashboard-history.png")

    def open_running(running):
        numbers = optuna_numbers(sweep)[1]
        number = next((numbers[t] for t in sorted(running) if t in numbers), None)
        page.goto(f"http://127.0.0.1:{od_port}/dashboard/studies/{study_id}/trials?numbers={number}")
        page.get_by_text("User Attributes").first.wait_for(timeout=30_000)

    trial = page_shows_running_trial(page, sweep, timeout, metric=False, open_page=open_running)
    shoot(page, out / "optuna-dashboard-trial.png")
    print(f"optuna-dashboard: running trial {trial} shown")


if __name__ == "__main__":
    sys.exit(main())
