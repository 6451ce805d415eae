"""Sweep folders on a local disk or behind a pyarrow.fs URI."""
import pytest

from analysis.location import Location


def test_resolve_folder_results_and_uri(finished_sweep):
    for given in (finished_sweep, finished_sweep / "results", f"file://{finished_sweep}", str(finished_sweep) + "/"):
        location = Location.resolve(given)
        assert location.root == str(finished_sweep) and location.uri == str(finished_sweep)
        assert location.local == finished_sweep
    with pytest.raises(FileNotFoundError, match="not a sweep folder"):
        Location.resolve(finished_sweep / "results" / "epochs")


def test_listing_skips_the_sinks_temporary_files(tmp_path):
    (tmp_path / "results" / "epochs").mkdir(parents=True)
    (tmp_path / "results" / "epochs" / "a.parquet").write_bytes(b"x")
    (tmp_path / "results" / "epochs" / ".b.parquet.1a2b3c4d.tmp").write_bytes(b"half")
    location = Location.resolve(tmp_path)
    assert location.list("results/epochs", ".parquet") == ["results/epochs/a.parquet"]
    assert location.list("results/missing", ".parquet") == []
    location.write_bytes("figures/x.png", b"png")
    assert location.read_bytes("figures/x.png") == b"png" and location.is_dir("figures")
    assert location.display("report.md") == f"{tmp_path}/report.md"
