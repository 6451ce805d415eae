"""``xbm-tune embed`` (tune/commands/embed.py): Parquet of path, embedding, label; bad input exits 2, named."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tests.xbm.data.conftest import truncate
from tests.xbm.embedder_fixture import class_folder, export_trainer, omniglot_mlp_trainer
from tune.cli import main
from xbm.evaluate.embedder import WEIGHTS, load_embedder


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    root = tmp_path_factory.mktemp("embed")
    return export_trainer(omniglot_mlp_trainer(root / "data"), root / "export")


def test_embed_writes_paths_fixed_size_embeddings_and_class_labels(export, tmp_path):
    """Bug caught: rows not in the files' order, a variable-size list, labels lost or wrong, rows differing
    from the Python embedder's."""
    paths = class_folder(tmp_path / "images")
    out = tmp_path / "e.parquet"
    assert main(["embed", str(export), "--images", str(tmp_path / "images"), "--out", str(out),
                 "--batch-size", "4", "--device", "cpu"]) == 0
    table = pq.read_table(out)
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), 8)
    assert table["path"].to_pylist() == [str(p) for p in paths]
    assert table["label"].to_pylist() == ["class0"] * 3 + ["class1"] * 3 + ["class2"] * 3
    rows = torch.tensor(table["embedding"].to_pylist())
    assert float((rows - load_embedder(export, "cpu").embed([str(p) for p in paths])).abs().max()) <= 1e-6


def test_a_flat_folder_has_no_label(export, tmp_path):
    """Bug caught: a file name or the folder's own name taken as a class."""
    class_folder(tmp_path / "images", classes=1)
    (tmp_path / "images" / "class0" / "img0.png").rename(tmp_path / "images" / "top.png")
    out = tmp_path / "e.parquet"
    assert main(["embed", str(export), "--images", str(tmp_path / "images"), "--out", str(out), "--device", "cpu"]) == 0
    assert pq.read_table(out)["label"].to_pylist() == [None, None, None]


def test_an_undecodable_image_exits_2_or_is_skipped_and_named(export, tmp_path, capsys):
    """Bug caught: a corrupt image crashes with a traceback (stop), or is dropped silently (skip)."""
    paths = class_folder(tmp_path / "images")
    truncate(paths[4])
    out = tmp_path / "e.parquet"
    assert main(["embed", str(export), "--images", str(tmp_path / "images"), "--out", str(out), "--device", "cpu"]) == 2
    assert str(paths[4]) in capsys.readouterr().err and not out.exists()
    assert main(["embed", str(export), "--images", str(tmp_path / "images"), "--out", str(out), "--device", "cpu",
                 "--on-error", "skip"]) == 0
    captured = capsys.readouterr()
    assert str(paths[4]) in captured.err and "skipped 1 image" in captured.out
    assert pq.read_table(out)["path"].to_pylist() == [str(p) for p in paths if p != paths[4]]


def test_an_export_folder_missing_a_file_exits_2_naming_it(export, tmp_path, capsys):
    """Bug caught: a folder without its weights fails deep inside safetensors, exit 1, nothing named."""
    class_folder(tmp_path / "images")
    partial = tmp_path / "partial"
    partial.mkdir()
    for name in ("embedder.yaml", "README.md"):
        (partial / name).write_bytes((export / name).read_bytes())
    out = tmp_path / "e.parquet"
    assert main(["embed", str(partial), "--images", str(tmp_path / "images"), "--out", str(out)]) == 2
    assert WEIGHTS in capsys.readouterr().err
