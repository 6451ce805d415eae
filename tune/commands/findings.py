"""``xbm-tune findings SWEEP [SWEEP ...]``: a finished findings sweep (``search_spaces/findings_*.yaml``) as its
claim's figure and verdicts (``analysis.findings``): one verdict line per condition its space's header states,
the figure (the paper's values beside the measured curve, 95% intervals over seeds, the floors) and two CSVs."""
from __future__ import annotations

import argparse
from pathlib import Path

from tune.errors import SweepInputError, bad_input


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Judge a finished findings sweep's claim: print a verdict line per condition stated in\n"
                          "its space's header (reproduced, not reproduced or inconclusive, with the numbers), and\n"
                          "write findings.png, curve.csv and verdicts.csv.")
    parser.epilog = ("examples:\n  xbm-tune findings ~/xbm_sweeps/findings_batch_size-20261203-090000\n"
                     "  xbm-tune findings SWEEP MORE_SEEDS --out figures/ratio   # two sweeps of one claim, together")
    parser.add_argument("paths", metavar="SWEEP", nargs="+",
                        help="the sweep folder(s) (<storage>/<name>, or URIs), read together; the first names the claim")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="where the figure and CSVs go (default: SWEEP/findings of the first sweep)")
    parser.add_argument("--claim", default=None,
                        help="the claim to judge, a findings space's name (default: the first sweep's space)")


def run(args: argparse.Namespace) -> int:
    """``xbm-tune findings``: judge a findings sweep's claim: verdict lines, figure and CSVs.

    Args:
        args: the parsed arguments of ``xbm-tune findings`` (``add_arguments``).

    Returns:
        The exit status: 0 when done.

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    import analysis
    from analysis.findings import CLAIMS, sweep_findings
    from analysis.findings_plot import draw_findings
    from analysis.location import is_uri

    with bad_input():
        sweep = analysis.load(args.paths)
        claim = args.claim or sweep.record.space.name
        if claim not in CLAIMS:
            raise SweepInputError(f"--claim must be one of {list(CLAIMS)}, but the sweep's space is {claim!r}: "
                                  "give a findings sweep, or name its claim with --claim")
        found = sweep_findings(sweep, claim)
    if args.out is None and is_uri(args.paths[0]):
        raise SweepInputError("--out is needed for a sweep at a URI (the figure is written to a local folder)")
    out = Path(args.out or Path(args.paths[0]).expanduser() / "findings")
    out.mkdir(parents=True, exist_ok=True)
    found.curve.to_csv(out / "curve.csv", index=False)
    verdicts = [vars(v) for v in found.verdicts]
    import pandas as pd

    pd.DataFrame(verdicts).to_csv(out / "verdicts.csv", index=False)
    figure = draw_findings(found, out / "findings.png")
    print(f"claim: {claim} ({len(found.curve)} measured points)")
    if found.floors:
        print(f"the runs' final Recall@1: {found.recall:.2f}% (floors: " + ", ".join(
            f"{name} {value:.2f}%" for name, value in found.floors.items()) + ")")
    for verdict in found.verdicts:
        print(verdict.line())
    print(f"figure: {figure}")
    print(f"tables: {out / 'curve.csv'}, {out / 'verdicts.csv'}")
    return 0
