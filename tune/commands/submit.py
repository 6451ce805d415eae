"""``xbm-tune submit SPACE [sweep flags] --address http://HEAD:8265``: a sweep as a Ray job.

The sweep is checked here first (the same checks as ``xbm-tune sweep``: a mistake exits 2 and submits
nothing), then sent through Ray's Job Submission API (``JobSubmissionClient.submit_job``) with the
submission id = the sweep's name. The job's entrypoint is ``xbm-tune sweep`` with the same flags,
``--name <that name>`` and ``--address auto`` (it runs on the head node and joins the cluster), after the
log flags given before ``submit`` (``xbm-tune --quiet submit ...``: a quiet job), so the
dashboard's Jobs page lists the sweep by name and shows its driver log, Tune's progress table included.
The head node must have xbm-tune installed and on its ``PATH`` (start Ray from the project's
environment), and a YAML space file must be readable there (shipped space names always are).

Token authentication: like ``ray.init`` and ``ray start``, a token in ``~/.ray/auth_token`` or
``RAY_AUTH_TOKEN`` turns it on unless ``RAY_AUTH_MODE`` says otherwise; Ray's client then sends it.
"""
from __future__ import annotations

import argparse
import shlex
import time
from typing import Sequence

from tune.errors import SweepInputError, bad_input

DEFAULT_DASHBOARD = "http://127.0.0.1:8265"
#: how long to wait for a head (or its job agent) that is still starting
AGENT_WAIT_S = 60.0
#: flags of ``xbm-tune sweep`` that the job sets itself (value-taking ones drop their value too)
_DROPPED_WITH_VALUE = ("--address",)
_DROPPED = ("--dashboard", "--no-dashboard")


def job_argv(argv: Sequence[str], name: str) -> list[str]:
    """The job's ``xbm-tune sweep`` arguments: ``argv`` (what followed ``submit``) without ``--address``
    and the dashboard flags, then ``--name NAME --address auto``."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        flag = arg.split("=", 1)[0]
        if flag in _DROPPED_WITH_VALUE:
            skip = "=" not in arg
            continue
        if flag in _DROPPED:
            continue
        out.append(arg)
    return ["sweep", *out, "--name", name, "--address", "auto"]


def job_entrypoint(argv: Sequence[str], name: str, global_flags: Sequence[str] = ()) -> str:
    """The job's command line: ``xbm-tune``, the flags given before ``submit`` (``--quiet``, ``-v``), then
    :func:`job_argv`."""
    return shlex.join(["xbm-tune", *global_flags, *job_argv(argv, name)])


def enable_token_auth_if_available() -> bool:
    """Ray's own rule for clients (``ray start`` applies it): a stored token turns token auth on when
    ``RAY_AUTH_MODE`` is unset; JobSubmissionClient then sends ``Authorization: Bearer <token>``. Returns
    whether token auth is on."""
    try:
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available)
    except ImportError:  # a Ray without token authentication
        return False
    return bool(maybe_enable_token_auth_if_token_available(warn_if_disabled=False))


def submit(argv: Sequence[str], name: str, address: str, global_flags: Sequence[str] = ()) -> str:
    """Submit the sweep named ``name`` as a job; return the job's submission id (= ``name``)."""
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    enable_token_auth_if_available()
    entrypoint = job_entrypoint(argv, name, global_flags)
    try:
        return _submit_when_ready(lambda: JobSubmissionClient(address), entrypoint, name)
    except AuthenticationError as exc:
        raise SweepInputError(f"--address {address}: the dashboard refused the token ({exc}); put the "
                              f"cluster's token in ~/.ray/auth_token or RAY_AUTH_TOKEN "
                              f"(on the head: `ray get-auth-token`)") from None
    except ConnectionError as exc:
        raise SweepInputError(f"--address {address}: no Ray dashboard answered ({exc}); start one with "
                              f"`ray start --head` or give the head's dashboard URL (http://HEAD:8265)") from None
    except RuntimeError as exc:
        if "already exists" in str(exc):
            raise SweepInputError(f"a job named {name!r} already exists on {address}: choose another --name") from None
        raise


def _submit_when_ready(connect, entrypoint: str, name: str, wait_s: float = AGENT_WAIT_S) -> str:
    """Connect and submit; a head started seconds ago (or a very busy one) may not answer yet, or answer
    "No available agent" until its job agent is up (Ray asks to "try again later"): retry those two for
    up to ``wait_s`` seconds, then raise the last error."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return connect().submit_job(entrypoint=entrypoint, submission_id=name,
                                        metadata={"job_name": name, "xbm_sweep": name})  # job_name: the Name column
        except (ConnectionError, RuntimeError) as exc:
            retry = isinstance(exc, ConnectionError) or "No available agent" in str(exc)
            if not retry or time.monotonic() > deadline:
                raise
            time.sleep(2)


def follow_help(job_id: str, address: str, token_auth: bool = False) -> str:
    """The commands that follow a submitted job. With token auth, ``ray job`` sends the token only under
    ``RAY_AUTH_MODE=token`` (a stored token alone does not turn it on there: 'Missing authentication token')."""
    ray = "RAY_AUTH_MODE=token ray" if token_auth else "ray"
    return (f"submitted job {job_id}\n"
            f"  follow:  {ray} job logs -f --address {address} {job_id}\n"
            f"  status:  {ray} job status --address {address} {job_id}\n"
            f"  stop:    {ray} job stop --address {address} {job_id}\n"
            f"  Jobs page: {address.rstrip('/')}/#/jobs (the driver log holds Tune's progress table)")


#: what `xbm-tune dashboard` prints
SUBMIT_EXAMPLES = """examples:
  xbm-tune submit quickstart --address http://127.0.0.1:8265
  xbm-tune submit full --num-samples 200 --gpus-per-trial 0.5 --address http://HEAD:8265"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tune.commands._arguments import add_sweep_arguments

    parser.description = ("Check a sweep here as `xbm-tune sweep` would (a mistake exits 2 and submits nothing),\n"
                          "then send it as a Ray job to a running cluster through its dashboard (Ray's Job\n"
                          "Submission API); the job runs `xbm-tune sweep` on the head node with the same flags.")
    parser.epilog = SUBMIT_EXAMPLES
    add_sweep_arguments(parser, cluster=False)
    parser.add_argument("--address", default=DEFAULT_DASHBOARD,
                        help="the dashboard URL of the running cluster that receives the job (Ray's Job Submission "
                             "API, http://HEAD:8265), not a cluster address such as auto or ray://HOST:10001 (the "
                             "job itself joins with --address auto) (default %(default)s)")


def run(args: argparse.Namespace) -> int:
    """``xbm-tune submit``: run a sweep as a Ray job on a running cluster.

    Args:
        args: the parsed arguments of ``xbm-tune submit`` (``add_arguments``).

    Returns:
        The exit status: 0 when done.

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    from tune.commands._arguments import options_from
    from tune.driver.plan import prepare

    with bad_input():  # the sweep's own checks, here, before anything reaches the cluster
        plan = prepare(args.space, options_from(args))
    argv = list(args.argv)
    at = argv.index("submit") if "submit" in argv else -1
    job_id = submit(argv[at + 1:], plan.experiment, args.address, global_flags=argv[:max(at, 0)])
    print(follow_help(job_id, args.address, enable_token_auth_if_available()))
    print(f"results (on the cluster's storage): {plan.results_uri}")
    return 0
