"""``xbm-tune embed DIR --images FOLDER --out embeddings.parquet``: an export folder's embeddings of a folder.

The Parquet file has one row per image: ``path`` (string), ``embedding`` (fixed-size list of float32, the
L2-normalised row) and ``label`` (the class sub-folder's name for a ``FOLDER/<class>/<image>`` layout, else
null); its schema metadata ``embedder`` holds the export's provenance. ``--on-error stop`` (default) exits 2
naming an image that cannot be decoded; ``skip`` leaves it out and names it. Exit 2 also for an export
folder missing a file and a folder without images. A progress bar on stderr counts the images (``xbm.runtime.progress``:
none under ``--no-progress`` or when stderr is not a terminal).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional

from tune.commands._arguments import add_embedding_arguments

EMBED_EXAMPLES = """examples:
  xbm-tune embed embedder/ --images photos/ --out embeddings.parquet
  xbm-tune embed embedder/ --images photos/ --out embeddings.parquet --on-error skip --device cpu
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Embed a folder of images with an export folder's embedder into Parquet: one row per\n"
                          "image (path, L2-normalised embedding, label from a FOLDER/<class>/<image> layout).")
    parser.epilog = EMBED_EXAMPLES
    parser.add_argument("export", metavar="DIR", help="an export folder (xbm-tune export)")
    parser.add_argument("--images", metavar="FOLDER", required=True, help="the images (searched recursively)")
    parser.add_argument("--out", metavar="FILE.parquet", required=True, help="the Parquet file to write")
    add_embedding_arguments(parser)


def write_embeddings(path: str, paths: list[str], rows, labels: Optional[list[str]], about: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    flat = pa.array(rows.numpy().reshape(-1), type=pa.float32())
    table = pa.table({"path": pa.array(paths, pa.string()),
                      "embedding": pa.FixedSizeListArray.from_arrays(flat, rows.shape[1]),
                      "label": pa.array(labels if labels is not None else [None] * len(paths), pa.string())})
    table = table.replace_schema_metadata({"embedder": json.dumps(about, default=str)})
    pq.write_table(table, path)


def run(args: argparse.Namespace) -> int:
    """``xbm-tune embed``: embed a folder of images with an export folder, into Parquet.

    Args:
        args: the parsed arguments of ``xbm-tune embed`` (``add_arguments``).

    Returns:
        The exit status: 0 when the Parquet was written, 2 on bad input (the message printed).

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    from xbm.data.image_folder import list_images
    from xbm.errors import BadImageError
    from xbm.evaluate.embedder import embed_files, load_embedder

    try:
        embedder = load_embedder(args.export, device=args.device)
        paths, labels = list_images(args.images)
        if args.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, but got {args.batch_size}")
        kept, rows = embed_files(embedder, paths, args.batch_size, args.device, args.on_error,
                                 progress=args.progress)
    except (ValueError, FileNotFoundError, BadImageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    skipped = len(paths) - len(kept)
    write_embeddings(args.out, [paths[i] for i in kept], rows, None if labels is None else [labels[i] for i in kept],
                     embedder.provenance)
    print(f"wrote {len(kept)} embeddings ({rows.shape[1]} dimensions) to {args.out}"
          + (f"; skipped {skipped} image(s) that could not be decoded" if skipped else ""))
    return 0
