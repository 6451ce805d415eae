"""``xbm-tune report PATH``: report.md and its figures, written into the sweep folder (``analysis.report``).

A progress bar on stderr names the step running (loading, each section, writing) once the report has taken a
few seconds (``xbm.runtime.progress``: none under ``--no-progress`` or when stderr is not a terminal).
"""
from __future__ import annotations

import argparse

from tune.errors import bad_input


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Write report.md and its figures (figures/*.png) into a sweep folder, from its\n"
                          "Parquet.")
    parser.add_argument("path", metavar="PATH", help="the sweep folder (<storage>/<name>), or a URI")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress bar (never drawn when stderr is not a terminal)")


class StepBar:
    """``write_report``'s ``on_step`` on a tqdm bar of its steps: each call ends the step before (one more done)
    and shows the name of the one beginning."""

    def __init__(self, bar) -> None:
        self.bar, self.begun = bar, False

    def __call__(self, name: str) -> None:
        if self.begun:
            self.bar.update(1)
        self.begun = True
        self.bar.set_postfix_str(name)


def run(args: argparse.Namespace) -> int:
    """``xbm-tune report``: write report.md and figures into a sweep folder.

    Args:
        args: the parsed arguments of ``xbm-tune report`` (``add_arguments``).

    Returns:
        The exit status: 0 when done.

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    from analysis.report import STEPS, write_report
    from xbm.runtime.progress import DELAY_S, bar

    with bad_input():  # not a sweep folder, or its trials.parquet unreadable: exit 2 naming the path
        with bar(desc="report", enabled=getattr(args, "progress", True), delay_s=DELAY_S, total=STEPS,
                 unit="step") as steps:
            path = write_report(args.path, neighbours=trial_neighbours, on_step=StepBar(steps))
            steps.update(1)  # the last step (writing) is done
    print(f"report: {path}")
    return 0


def trial_neighbours(uri: str, queries: int, k: int) -> dict:
    """The report's retrieval examples (``analysis.retrieval.NeighboursOf``): the best weights at ``uri`` embed
    ``queries`` test queries of their own data set, with their ``k`` nearest test images. FileNotFoundError
    when the weights are gone, ValueError when the data set cannot be read or holds vectors."""
    import io

    import torch

    from analysis.location import read_file_bytes
    from xbm.evaluate.retrieval import split_neighbours

    data = read_file_bytes(uri, "the best trial's weights")
    payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    try:
        found = split_neighbours(payload, queries, k)
    except FileNotFoundError as exc:  # the data set moved: the weights are there
        raise ValueError(str(exc)) from exc
    return {**found, "epoch": payload.get("epoch")}
