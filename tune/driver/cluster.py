"""Where a sweep runs: a local Ray (dashboard on 127.0.0.1) or an existing cluster (``--address``).

Ray 2.60 turns on token authentication for a local ``ray.init()``: it writes a token to
``~/.ray/auth_token`` and every request to the dashboard must carry it. We keep it on and print how to
get in: open the URL, paste the token that ``ray get-auth-token`` prints (the dashboard stores it in a
cookie). From another machine, tunnel the port (``ssh -L 8265:127.0.0.1:8265 host``): the dashboard only
listens on 127.0.0.1. ``RAY_AUTH_MODE=disabled`` opts out (not recommended). Where the sweep runs is logged at
INFO (``tune.driver.cluster``; ``xbm-tune`` shows it on stderr unless ``--quiet``).
"""
from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import ray

log = logging.getLogger(__name__)

TOKEN_HELP = ("token authentication is on: when the page asks, paste the token printed by "
              "`ray get-auth-token` (stored in ~/.ray/auth_token); from another machine tunnel first: "
              "ssh -L {port}:127.0.0.1:{port} <this host>")


@dataclass(frozen=True)
class ClusterInfo:
    """What the driver is connected to. ``started`` is True when this process started Ray (and so
    shuts it down at the end)."""

    address: str
    dashboard_url: str | None
    token_auth: bool
    started: bool
    nodes: int
    cpus: float
    gpus: float

    def describe(self) -> str:
        where = "local Ray" if self.started else f"cluster at {self.address}"
        lines = [f"Ray: {where}, {self.nodes} node(s), {self.cpus:g} CPU(s), {self.gpus:g} GPU(s)"]
        if self.dashboard_url:
            url = self.dashboard_url if "://" in self.dashboard_url else f"http://{self.dashboard_url}"
            lines.append(f"Dashboard: {url}")
            if self.token_auth:
                port = url.rsplit(":", 1)[-1].strip("/")
                lines.append("  " + TOKEN_HELP.format(port=port))
        return "\n".join(lines)


def connect(address: str | None = None, dashboard: bool = True, **init_kwargs) -> ClusterInfo:
    """Join ``address`` (``auto``, ``host:port`` or ``ray://...``), or start a local Ray.

    A driver already connected (tests, notebooks) is reused as it is. ``init_kwargs`` go to
    ``ray.init`` for a local start (e.g. ``num_cpus``, ``num_gpus`` for fake GPUs). Without ``address`` (and
    without ``RAY_ADDRESS``, which a Ray job's driver has) a new local Ray, never the cluster Ray's own
    discovery finds: a stale /tmp/ray/ray_current_cluster left the sweep retrying a dead address forever.
    """
    started = False
    if not ray.is_initialized():
        if address:
            url = ray.init(address=address).dashboard_url
        else:
            local = {} if os.environ.get("RAY_ADDRESS") else {"address": "local"}
            url = ray.init(include_dashboard=dashboard, dashboard_host="127.0.0.1", **local,
                           **init_kwargs).dashboard_url
            started = True
    else:
        # no public getter for an existing connection's dashboard
        from ray._private.worker import get_dashboard_url

        url = get_dashboard_url()
    context = ray.get_runtime_context()
    resources = ray.cluster_resources()
    url = url or None
    return ClusterInfo(
        address=context.gcs_address, dashboard_url=url,
        token_auth=os.environ.get("RAY_AUTH_MODE", "").lower() == "token", started=started,
        nodes=len([n for n in ray.nodes() if n.get("Alive")]), cpus=float(resources.get("CPU", 0.0)),
        gpus=float(resources.get("GPU", 0.0)))


def disconnect(info: ClusterInfo) -> None:
    """Shut down the Ray this process started; leave a joined cluster (or a test's Ray) running."""
    if info.started and ray.is_initialized():
        ray.shutdown()


@contextmanager
def ray_session(address: str | None = None, dashboard: bool = True, **init_kwargs) -> Iterator[ClusterInfo]:
    """The driver's Ray for one command: ``connect``, log where it runs (INFO), and ``disconnect`` at the end,
    whatever happens inside (a Ray this process started is shut down; a joined one left running)."""
    info = connect(address, dashboard, **init_kwargs)
    log.info("%s", info.describe())
    try:
        yield info
    finally:
        disconnect(info)
