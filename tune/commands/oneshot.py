"""``xbm-tune oneshot EXPORT --runs PATH``: an export's error on Omniglot's 20-way one-shot classification runs.

The runs are ``all_runs.zip`` of github.com/brendenlake/omniglot (Lake, Salakhutdinov and Tenenbaum, Science
2015): ``PATH`` is that zip itself (extracted into a temporary folder while the runs are scored, the runs at
its top or inside its one top folder) or the folder it extracts to (``run01`` .. ``run20``;
:mod:`xbm.evaluate.oneshot`), with the same result. Each test drawing is assigned the run's training drawing
of highest cosine similarity, the drawings read with the export's own preprocessing (``embedder.yaml``: grey,
inverted for Omniglot's dark strokes, size, statistics). Prints each run's error and their mean with a 95%
Student-t interval over runs (``mean ± t_{0.975, n-1} s / sqrt(n)``, :func:`analysis.compare.t_interval`; none
for one run), in percent, and writes a Parquet of one row per run: ``run``, ``n_test``, ``n_train``,
``errors``, ``error`` (a fraction), schema metadata ``oneshot`` (the mean and interval and ``runs``, the PATH
given) and ``embedder`` (the export's provenance). Exit 2 naming what is wrong, nothing written: a folder or
zip without runs, a damaged zip, a run without ``class_labels.txt``, a listed drawing missing, a drawing that
cannot be decoded, an export folder missing a file. The export folder is checked before the runs, so a bad
``EXPORT`` is named whatever ``--runs`` is (both are named when both are wrong).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SUFFIX = ".oneshot.parquet"

ONESHOT_EXAMPLES = """examples:
  xbm-tune oneshot embedder/ --runs omniglot/all_runs.zip    # writes embedder.oneshot.parquet beside embedder/
  xbm-tune oneshot embedder/ --runs omniglot/all_runs        # the same, the zip extracted
  xbm-tune oneshot embedder/ --runs omniglot/all_runs.zip --out oneshot.parquet --device cpu
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Prints each run's error (the share of its test drawings whose most similar training\n"
                          "drawing, by cosine, is another class's) and their mean with a 95% Student-t interval\n"
                          "over runs, in percent; writes one Parquet row per run.")
    parser.epilog = ONESHOT_EXAMPLES
    parser.add_argument("export", metavar="EXPORT", help="an export folder (xbm-tune export)")
    parser.add_argument("--runs", metavar="PATH", required=True,
                        help="the one-shot runs: all_runs.zip of brendenlake/omniglot, as it is or extracted "
                             "(a folder of run01 .. run20)")
    parser.add_argument("--out", metavar="FILE.parquet",
                        help=f"the per-run errors (default: beside EXPORT, <EXPORT>{SUFFIX})")
    parser.add_argument("--batch-size", type=int, default=64, help="(default %(default)s)")
    parser.add_argument("--device", default="auto",
                        help="auto (CUDA when present), cpu, cuda:0, ... (default %(default)s)")


def default_out(export: str) -> Path:
    folder = Path(export).resolve()
    return folder.parent / f"{folder.name}{SUFFIX}"


def run(args: argparse.Namespace) -> int:
    """``xbm-tune oneshot``: an export's error on Omniglot's 20-way one-shot runs.

    Args:
        args: the parsed arguments of ``xbm-tune oneshot`` (``add_arguments``).

    Returns:
        The exit status: 0 when the runs were scored, 2 on bad input (the message printed).

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    from analysis.compare import CONFIDENCE, t_interval
    from xbm.errors import BadImageError
    from xbm.evaluate.embedder import ExportFolderError, load_embedder, read_card
    from xbm.evaluate.oneshot import evaluate_runs, read_runs, runs_folder

    try:  # the export's files first (no model loaded): a bad EXPORT is named even when --runs is bad too
        read_card(args.export)
        bad_export = None
    except ExportFolderError as exc:
        bad_export = exc
    try:
        if args.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, but got {args.batch_size}")
        with runs_folder(args.runs) as folder:  # a zip: extracted until the runs are scored
            runs = read_runs(folder)  # every run checked before the model is loaded
            if bad_export is not None:
                raise bad_export
            embedder = load_embedder(args.export, device=args.device)
            results = evaluate_runs(runs, lambda paths: embedder.embed(paths, args.batch_size, args.device))
    except (ValueError, FileNotFoundError, BadImageError) as exc:
        if bad_export is not None and exc is not bad_export:
            print(f"error: {bad_export}", file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    interval = t_interval([r.error for r in results], CONFIDENCE)
    print(f"one-shot classification of {args.export} on {len(results)} run(s) of {args.runs}:")
    for r in results:
        print(f"  {r.run}  error {100 * r.error:6.2f}%  ({r.errors}/{r.n_test} wrong, {r.n_train}-way)")
    spread = (f"{CONFIDENCE:.0%} t-interval over runs {100 * interval.low:.2f}% to {100 * interval.high:.2f}%"
              if interval.n >= 2 else "no interval from one run")
    print(f"mean error {100 * interval.mean:.2f}% ({spread})")
    out = Path(args.out) if args.out else default_out(args.export)
    bounds = {k: None if v != v else v for k, v in (("mean", interval.mean), ("low", interval.low),
                                                     ("high", interval.high))}  # NaN is no JSON
    summary = {**bounds, "confidence": CONFIDENCE,
               "interval": "student-t over runs", "runs": str(args.runs), "export": str(args.export)}
    write_results(out, results, summary, embedder.provenance)
    print(f"wrote {out}")
    return 0


def write_results(path: Path, results, summary: dict, provenance: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"run": pa.array([r.run for r in results], pa.string()),
                      "n_test": pa.array([r.n_test for r in results], pa.int64()),
                      "n_train": pa.array([r.n_train for r in results], pa.int64()),
                      "errors": pa.array([r.errors for r in results], pa.int64()),
                      "error": pa.array([r.error for r in results], pa.float64())})
    table = table.replace_schema_metadata({"oneshot": json.dumps(summary),
                                           "embedder": json.dumps(provenance, default=str)})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
