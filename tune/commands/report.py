"""``xbm-tune report PATH``: report.md and its figures, written into the sweep folder (``analysis.report``)."""
from __future__ import annotations

import argparse

from tune.options import bad_input


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Write report.md and its figures (figures/*.png) into a sweep folder, from its\n"
                          "Parquet.")
    parser.add_argument("path", metavar="PATH", help="the sweep folder (<storage>/<name>), or a URI")


def run(args: argparse.Namespace) -> int:
    from analysis.report import write_report

    with bad_input():  # not a sweep folder, or its trials.parquet unreadable: exit 2 naming the path
        path = write_report(args.path, neighbours=trial_neighbours)
    print(f"report: {path}")
    return 0


def trial_neighbours(uri: str, queries: int, k: int) -> dict:
    """The report's retrieval examples (``analysis.retrieval.Neighbours``): the best weights at ``uri`` embed
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
