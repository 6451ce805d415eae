"""``xbm-tune retrieve DIR --gallery FOLDER|PARQUET --query FOLDER|FILES --k 5 [--grid out.png]``.

Embeds the queries (and a gallery folder; a gallery Parquet file from ``xbm-tune embed`` is read as it is)
with an export folder's embedder, prints each query's top ``k`` gallery images (rank, cosine similarity,
path, label where the folder layout gives one), and with ``--grid`` draws query -> top-k as a PNG (borders
green/red where both labels are known). A query that is also in the gallery (same path) is not its own
neighbour. Exit 2 naming what is wrong: an export folder missing a file, a missing folder or file, an image
that cannot be decoded (``--on-error stop``; ``skip`` leaves it out), a gallery of another embedding size.
Progress bars on stderr count the gallery's and the queries' images as they are embedded (none under
``--no-progress`` or when stderr is not a terminal: ``xbm.runtime.progress``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

RETRIEVE_EXAMPLES = """examples:
  xbm-tune retrieve embedder/ --gallery photos/ --query queries/ --k 5
  xbm-tune retrieve embedder/ --gallery embeddings.parquet --query a.jpg b.jpg --grid top5.png
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tune.commands._arguments import add_embedding_arguments

    parser.description = ("Print each query's top-k gallery images by cosine similarity, embedded with an export\n"
                          "folder's embedder (the gallery a folder, or an `xbm-tune embed` Parquet); --grid draws\n"
                          "them as a PNG.")
    parser.epilog = RETRIEVE_EXAMPLES
    parser.add_argument("export", metavar="DIR", help="an export folder (xbm-tune export)")
    parser.add_argument("--gallery", required=True, metavar="FOLDER|PARQUET",
                        help="a folder of images, or the Parquet file of xbm-tune embed")
    parser.add_argument("--query", required=True, nargs="+", metavar="FOLDER|FILES",
                        help="a folder of images, or image files")
    parser.add_argument("--k", type=int, default=5, help="neighbours per query (default %(default)s)")
    parser.add_argument("--grid", metavar="OUT.png", help="also draw query -> top-k as an image grid")
    add_embedding_arguments(parser)


def read_gallery(path: str, embedder, args) -> tuple[list[str], "object", list | None]:
    """(paths, rows [n, d] float32, labels or None) of a gallery folder (embedded now) or Parquet file."""
    import torch

    from xbm.data.image_folder import list_images
    from xbm.evaluate.embedder import embed_files

    if Path(path).is_file():
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as exc:  # noqa: BLE001 - not Parquet, truncated: named
            raise ValueError(f"--gallery {path} is neither a folder nor a readable Parquet file ({exc})") from None
        missing = {"path", "embedding"} - set(table.column_names)
        if missing:
            raise ValueError(f"--gallery {path} must have the columns path and embedding (xbm-tune embed), "
                             f"but lacks {sorted(missing)}")
        rows = torch.tensor(table["embedding"].to_pylist(), dtype=torch.float32)
        labels = table["label"].to_pylist() if "label" in table.column_names else None
        return table["path"].to_pylist(), rows, labels
    paths, labels = list_images(path)
    kept, rows = embed_files(embedder, paths, args.batch_size, args.device, args.on_error, "gallery",
                             getattr(args, "progress", True))
    return [paths[i] for i in kept], rows, None if labels is None else [labels[i] for i in kept]


def read_queries(items: list[str]) -> tuple[list[str], list | None]:
    from xbm.data.image_folder import list_images

    if len(items) == 1 and Path(items[0]).is_dir():
        return list_images(items[0])
    missing = [p for p in items if not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"--query: no such image file(s): {', '.join(missing)}")
    return list(items), None


def search(query, gallery, k: int, query_paths: list[str], gallery_paths: list[str]):
    """Top-``k`` (indices, similarities) per query, a query's own path left out of its list."""
    from xbm.evaluate.retrieval import nearest

    extra = int(bool(set(map(_key, query_paths)) & set(map(_key, gallery_paths))))
    depth = min(k + extra, len(gallery))
    if depth < 1 or k < 1:
        raise ValueError(f"--k must be >= 1 and the gallery non-empty, but got k={k} and {len(gallery)} gallery images")
    indices, sims = nearest(query, depth, gallery)
    out = []
    for q, path in enumerate(query_paths):
        pairs = [(int(j), float(s)) for j, s in zip(indices[q], sims[q]) if _key(gallery_paths[int(j)]) != _key(path)]
        out.append(pairs[:k])
    return out


def _key(path: str) -> str:
    return str(Path(path).resolve())


def run(args: argparse.Namespace) -> int:
    """``xbm-tune retrieve``: top-k gallery images per query with an export folder.

    Args:
        args: the parsed arguments of ``xbm-tune retrieve`` (``add_arguments``).

    Returns:
        The exit status: 0 when the results were written, 2 on bad input (the message printed).

    Raises:
        SweepInputError: input the command refuses (a missing folder, a bad value), which ``tune.cli``
            prints as ``error: ...`` with exit status 2; any other exception is a failure (exit status 1).
    """
    from xbm.errors import BadImageError
    from xbm.evaluate.embedder import embed_files, load_embedder

    try:
        embedder = load_embedder(args.export, device=args.device)
        gallery_paths, gallery, gallery_labels = read_gallery(args.gallery, embedder, args)
        if gallery.shape[1] != embedder.embedding_size:
            raise ValueError(f"--gallery {args.gallery} holds {gallery.shape[1]}-dimensional embeddings, but the "
                             f"embedder in {args.export} makes {embedder.embedding_size}: embed it with this export")
        paths, labels = read_queries(args.query)
        kept, query = embed_files(embedder, paths, args.batch_size, args.device, args.on_error, "queries",
                                  getattr(args, "progress", True))
        paths, labels = [paths[i] for i in kept], None if labels is None else [labels[i] for i in kept]
        results = search(query, gallery, args.k, paths, gallery_paths)
    except (ValueError, FileNotFoundError, BadImageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for q, path in enumerate(paths):
        print(f"query {path}" + (f"  [{labels[q]}]" if labels else ""))
        for rank, (j, sim) in enumerate(results[q], 1):
            label = f"  [{gallery_labels[j]}]" if gallery_labels and gallery_labels[j] is not None else ""
            print(f"  {rank}. {sim:.4f}  {gallery_paths[j]}{label}")
    if args.grid:
        draw_grid(args.grid, paths, labels, results, gallery_paths, gallery_labels)
        print(f"grid: {args.grid}")
    return 0


def draw_grid(out: str, paths, labels, results, gallery_paths, gallery_labels) -> None:
    import numpy as np
    from PIL import Image

    from analysis import plots
    from analysis.retrieval import grid_from_neighbours

    def thumb(path: str) -> np.ndarray:
        with Image.open(path) as image:
            image = image.convert("RGB")
            image.thumbnail((128, 128))
            return np.asarray(image)

    grid = grid_from_neighbours(
        [thumb(p) for p in paths], labels, [Path(p).name for p in paths],
        [[thumb(gallery_paths[j]) for j, _ in row] for row in results],
        None if gallery_labels is None else [[gallery_labels[j] for j, _ in row] for row in results],
        [[Path(gallery_paths[j]).name for j, _ in row] for row in results],
        [[s for _, s in row] for row in results], title="query -> top-k")
    plots.save(plots.plot_retrieval_grid(grid), out)
