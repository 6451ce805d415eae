"""xbm/version.py: ``xbm.__version__`` is the installed metadata's version, with a stated fallback."""
import importlib.metadata
from pathlib import Path

import pytest

import xbm
from xbm import version


def test_xbm_version_is_the_installed_metadata_s_version():
    """Bug caught: a version hard-coded in the package that drifts from pyproject's (the metadata pip writes),
    or ``__version__`` missing from the lazily attached names (AttributeError on ``xbm.__version__``)."""
    try:
        installed = importlib.metadata.version("xbm-tune")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("xbm-tune is not installed here (a source tree on PYTHONPATH)")
    assert xbm.__version__ == installed == version.package_version()
    assert "__version__" in dir(xbm)


def test_a_source_tree_reads_its_pyproject_and_anything_else_is_0_unknown(tmp_path):
    """Bugs caught: PackageNotFoundError escaping from ``import xbm`` when run from a source tree that is not
    installed, and another project's pyproject.toml (or a dynamic version) taken for xbm-tune's."""
    pytest.importorskip("tomllib")
    missing = "no-such-distribution-xbm-tune-test"   # stands for xbm-tune not installed
    ours = tmp_path / "ours.toml"
    ours.write_text('[project]\nname = "No_Such.distribution-xbm-tune-test"\nversion = "1.2.3"\n')  # PEP 503 equal
    other = tmp_path / "other.toml"
    other.write_text('[project]\nname = "something-else"\nversion = "9.9"\n')
    dynamic = tmp_path / "dynamic.toml"
    dynamic.write_text(f'[project]\nname = "{missing}"\ndynamic = ["version"]\n')
    broken = tmp_path / "broken.toml"
    broken.write_text("[project\n")
    assert version.package_version(missing, ours) == "1.2.3"   # not installed: the pyproject's
    for pyproject in (other, dynamic, broken, tmp_path / "absent.toml"):
        assert version.package_version(missing, pyproject) == version.UNKNOWN == "0+unknown", pyproject


def test_the_fallback_reads_this_checkout_s_pyproject():
    """Bug caught: the fallback pointing at a path that is not the checkout's pyproject.toml, so that a source
    tree on PYTHONPATH without an install always said 0+unknown."""
    tomllib = pytest.importorskip("tomllib")
    checkout = Path(__file__).resolve().parents[2]
    if Path(xbm.__file__).resolve().parents[1] != checkout:
        pytest.skip(f"xbm is imported from {xbm.__file__}, not from this checkout")
    assert version.PYPROJECT == checkout / "pyproject.toml"
    declared = tomllib.loads(version.PYPROJECT.read_text())["project"]["version"]
    assert version.source_tree_version("xbm-tune", version.PYPROJECT) == declared
