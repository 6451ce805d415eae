"""scripts/gpu_check_env.py's line saying which k-means the evaluation's ``nmi`` uses on the machine."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import faiss

from xbm.evaluate import knn as knn_search
from xbm.evaluate import metrics

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_check_env", ROOT / "scripts" / "gpu_check_env.py")
env = importlib.util.module_from_spec(spec)
spec.loader.exec_module(env)


def test_the_nmi_line_names_faiss_and_its_version_where_faiss_runs(capsys):
    """Bug caught: a lease's ``nmi`` figures that cannot say which k-means measured them (faiss-cpu was
    carried for that call; a wheel built against another numpy may not import there)."""
    env.nmi_kmeans()
    out = capsys.readouterr().out
    assert out.startswith(f"nmi k-means: faiss {faiss.__version__} (its C++ k-means on CPU embeddings, its Python "
                          "loop over a torch assignment on CUDA ones); a 400 x 16 nmi ran ("), out


def test_the_nmi_line_says_scikit_learn_when_faiss_cannot_be_imported(monkeypatch, capsys):
    """Bug caught: the line claiming faiss while ``nmi`` clustered with scikit-learn's k-means."""
    monkeypatch.setattr(knn_search, "faiss", None)
    env.nmi_kmeans()
    assert capsys.readouterr().out.startswith("nmi k-means: scikit-learn's (faiss cannot be imported")


def test_a_failing_nmi_is_a_line_not_an_error(monkeypatch, capsys):
    """Bug caught: the env part, which must run on any machine, ending on a broken faiss wheel before the
    check's other parts have their facts."""
    def broken(*args, **kwargs):
        raise RuntimeError("faiss wheel built for another numpy")

    monkeypatch.setattr(metrics, "nmi", broken)
    env.nmi_kmeans()
    assert capsys.readouterr().out == "nmi k-means: fails: RuntimeError: faiss wheel built for another numpy\n"
