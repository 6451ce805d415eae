"""Folders on a local disk or behind a pyarrow.fs URI: the one class tune writes through and analysis reads."""
from pathlib import Path

import pytest

from analysis.location import Folder


def test_resolve_folder_results_and_uri(finished_sweep):
    for given in (finished_sweep, finished_sweep / "results", f"file://{finished_sweep}", str(finished_sweep) + "/"):
        location = Folder.sweep(given)
        assert location.root == str(finished_sweep) and location.uri == str(finished_sweep)
        assert location.local == finished_sweep
    with pytest.raises(FileNotFoundError, match="not a sweep folder"):
        Folder.sweep(finished_sweep / "results" / "epochs")


def test_listing_skips_the_sinks_temporary_files(tmp_path):
    (tmp_path / "results" / "epochs").mkdir(parents=True)
    (tmp_path / "results" / "epochs" / "a.parquet").write_bytes(b"x")
    (tmp_path / "results" / "epochs" / ".b.parquet.1a2b3c4d.tmp").write_bytes(b"half")
    location = Folder.sweep(tmp_path)
    assert location.list("results/epochs", ".parquet") == ["a.parquet"]
    assert location.list("results/missing", ".parquet") == []
    location.write_bytes("figures/x.png", b"png")
    assert location.read_bytes("figures/x.png") == b"png" and location.is_dir("figures")
    assert location.display("report.md") == f"{tmp_path}/report.md"
    assert [p.name for p in (tmp_path / "figures").iterdir()] == ["x.png"]  # written atomically: no temporary left


def test_one_rule_for_local_folders_and_buckets(tmp_path):
    # Bug: each command tested "://" its own way, so `--storage file:///...` was a local folder for the Optuna
    # journal but a bucket for MLflow (no local tracking store); and a relative folder stayed relative.
    from analysis.location import absolute, filesystem_of, local_path, read_file_bytes

    assert local_path("file:///data/sweeps") == "/data/sweeps"
    assert local_path("s3://bucket/sweeps") is None
    assert local_path("~/sweeps") == str(Path.home() / "sweeps")
    assert absolute("s3://bucket/x") == "s3://bucket/x"
    assert absolute("rel") == str(Path.cwd() / "rel")
    assert filesystem_of("rel")[1] == str(Path.cwd() / "rel")
    (tmp_path / "w.pt").write_bytes(b"abc")
    assert read_file_bytes(f"file://{tmp_path}/w.pt", "the weights") == b"abc"
    with pytest.raises(FileNotFoundError, match=r"the weights .*gone\.pt does not exist"):
        read_file_bytes(str(tmp_path / "gone.pt"), "the weights")
