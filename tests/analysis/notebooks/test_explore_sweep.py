"""analysis/notebooks/explore_sweep.ipynb is stored without outputs and runs (nbclient) on a sweep
the tests create, with the venv's own Python as kernel."""
import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[3] / "analysis" / "notebooks" / "explore_sweep.ipynb"
KERNEL = "xbm-analysis-test"


def test_stored_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)
    assert "XBM_SWEEP" in "".join(c.source for c in code)


@pytest.mark.slow
def test_notebook_executes_on_a_sweep(confirm_sweep, tmp_path, monkeypatch):
    # a kernelspec pointing at this interpreter, so the kernel sees the same packages as the tests
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "xbm-tune tests", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("XBM_SWEEP", str(confirm_sweep))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PYTHONPATH", str(NOTEBOOK.parents[2]))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name=KERNEL, resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "28 trials" not in text and "34 trials, " in text  # 28 sweep + 6 confirm trials
    assert "value: final test_recall_at_1; stage: confirm" in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 10
