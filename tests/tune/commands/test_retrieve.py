"""``xbm-tune retrieve`` (tune/commands/retrieve.py): the known nearest neighbours, a grid, bad input exits 2."""
from __future__ import annotations

import io
import shutil
import sys

import numpy as np
import pytest

from tests.xbm.embedder_fixture import class_folder, export_trainer, omniglot_mlp_trainer
from tune.cli import main
from xbm.evaluate.embedder import load_embedder


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("retrieve")
    export = export_trainer(omniglot_mlp_trainer(root / "data"), root / "export")
    gallery = class_folder(root / "gallery")
    queries = root / "queries"
    queries.mkdir()
    for i in (1, 7):  # exact copies: each one's nearest neighbour is its original, similarity 1
        shutil.copy(gallery[i], queries / f"copy_of_{i}.png")
    return export, root, gallery, sorted(queries.iterdir())


def listed(out: str) -> dict[str, list[tuple[float, str]]]:
    results, query = {}, None
    for line in out.splitlines():
        if line.startswith("query "):
            query = line.split()[1]
            results[query] = []
        elif line.startswith("  ") and query:
            _, sim, path, *_ = line.split()
            results[query].append((float(sim), path))
    return results


def test_retrieve_lists_the_known_nearest_neighbours(setup, capsys):
    """Bug caught: neighbours ranked by distance the wrong way, indices mixed up between gallery and query,
    similarities not the cosine of the rows (compared with a brute-force numpy search)."""
    export, root, gallery, queries = setup
    assert main(["retrieve", str(export), "--gallery", str(root / "gallery"), "--query", *map(str, queries),
                 "--k", "4", "--device", "cpu"]) == 0
    results = listed(capsys.readouterr().out)
    embedder = load_embedder(export, "cpu")
    g = embedder.embed([str(p) for p in gallery]).numpy().astype(np.float64)
    for query, copied in zip(queries, (1, 7)):
        q = embedder.embed([str(query)]).numpy()[0].astype(np.float64)
        sims = g @ q
        order = np.argsort(-sims, kind="stable")[:4]
        got = results[str(query)]
        assert got[0][1] == str(gallery[copied]) and abs(got[0][0] - 1.0) < 1e-4
        assert [p for _, p in got] == [str(gallery[j]) for j in order]
        assert np.allclose([s for s, _ in got], sims[order], atol=1e-4)


def test_a_gallery_parquet_gives_the_same_answer_and_a_query_is_not_its_own_neighbour(setup, capsys, tmp_path):
    """Bug caught: the embed Parquet read in another order than written; a query in the gallery found itself."""
    export, root, gallery, _ = setup
    parquet = tmp_path / "g.parquet"
    assert main(["embed", str(export), "--images", str(root / "gallery"), "--out", str(parquet),
                 "--device", "cpu"]) == 0
    capsys.readouterr()
    args = ["--query", str(root / "gallery"), "--k", "2", "--device", "cpu"]
    assert main(["retrieve", str(export), "--gallery", str(root / "gallery"), *args]) == 0
    from_folder = listed(capsys.readouterr().out)
    assert main(["retrieve", str(export), "--gallery", str(parquet), *args]) == 0
    from_parquet = listed(capsys.readouterr().out)
    assert from_folder.keys() == {str(p) for p in gallery}
    for query, found in from_folder.items():
        assert [p for _, p in found] == [p for _, p in from_parquet[query]]
        assert query not in [p for _, p in found] and len(found) == 2


def test_grid_writes_a_png(setup, tmp_path):
    """Bug caught: --grid accepted and nothing drawn."""
    export, root, _, queries = setup
    out = tmp_path / "grid.png"
    assert main(["retrieve", str(export), "--gallery", str(root / "gallery"), "--query", str(queries[0]),
                 "--k", "3", "--grid", str(out), "--device", "cpu"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_exits_2_naming_it(setup, capsys, tmp_path):
    """Bug caught: a missing query file or an undecodable query ends in a traceback (exit 1)."""
    export, root, _, queries = setup
    gallery = ["retrieve", str(export), "--gallery", str(root / "gallery"), "--device", "cpu"]
    assert main([*gallery, "--query", str(tmp_path / "nope.png")]) == 2
    assert "nope.png" in capsys.readouterr().err
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    assert main([*gallery, "--query", str(bad)]) == 2
    assert "bad.png" in capsys.readouterr().err


class Terminal(io.StringIO):
    """A stderr that says it is a terminal (tqdm draws only there)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("flags, terminal, drawn", [([], True, True), (["--no-progress"], True, False),
                                                    ([], False, False)])
def test_the_gallery_and_queries_get_bars_only_on_a_terminal_without_no_progress(setup, monkeypatch, capsys, flags,
                                                                                 terminal, drawn):
    """Bugs caught (issue 55): retrieve's bars drawn into a log file or a pipe (they were built without
    ``disable=None``), or despite ``--no-progress``; the neighbours listed either way."""
    export, root, _, queries = setup
    stream = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    assert main(["retrieve", str(export), "--gallery", str(root / "gallery"), "--query", *map(str, queries),
                 "--k", "1", "--device", "cpu", *flags]) == 0
    assert len(listed(capsys.readouterr().out)) == len(queries)
    err = stream.getvalue()
    assert ("gallery:" in err, "queries:" in err) == (drawn, drawn), err
