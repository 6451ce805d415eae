"""Argument groups that several commands share (a command imports these, never another command)."""
from __future__ import annotations

import argparse


def add_rerun_arguments(parser: argparse.ArgumentParser) -> None:
    """The resource flags of a stage that re-runs a sweep's configurations (confirm, refit)."""
    ray = parser.add_argument_group("resources")
    ray.add_argument("--max-concurrent", type=int, default=None, help="trials at once (default: as resources allow)")
    ray.add_argument("--cpus-per-trial", type=float, default=None, help="default: the sweep's")
    ray.add_argument("--gpus-per-trial", type=float, default=None, help="default: the sweep's (fractions allowed)")
    ray.add_argument("--address", default=None,
                     help="the address of a running Ray cluster to join, as ray.init takes it (auto, HOST:PORT, "
                          "ray://HOST:10001), not its dashboard URL; default: start a local Ray")
    ray.add_argument("--dashboard", action=argparse.BooleanOptionalAction, default=True,
                     help="start Ray's dashboard on 127.0.0.1 (default on)")
