"""The example notebooks run headless from top to bottom (their own asserts included)."""

import re
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

EXAMPLES = Path(__file__).parents[1] / "examples"
NOTEBOOKS = sorted(p.name for p in EXAMPLES.glob("*.ipynb"))
DRAWS = re.compile(r"\b(plt\.subplots|plt\.figure|imshow|make_figures)\(")


def test_every_notebook_is_committed_without_outputs():
    assert NOTEBOOKS == ["01_quickstart.ipynb", "02_multislice_electron.ipynb", "03_multi_process.ipynb",
                         "04_xray_nearfield.ipynb", "05_watch_a_run.ipynb"]
    for name in NOTEBOOKS:
        book = nbformat.read(EXAMPLES / name, as_version=4)
        assert all(not cell.get("outputs") for cell in book.cells if cell.cell_type == "code"), name


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, monkeypatch):
    """Each notebook runs, and every cell that draws shows its figure inline: the library leaves
    the kernel's backend alone (MPLBACKEND unset, as in Jupyter) and prints no tqdm warning."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.delenv("MPLBACKEND", raising=False)
    book = nbformat.read(EXAMPLES / name, as_version=4)
    start = time.monotonic()
    nbclient.NotebookClient(book, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    elapsed = time.monotonic() - start
    print(f"{name}: {elapsed:.1f} s")
    errors = [o for cell in book.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    drawing = [cell for cell in book.cells if cell.cell_type == "code" and DRAWS.search(cell.source)]
    for cell in drawing:
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert images, f"{name}: no figure shown by the cell\n{cell.source[:300]}"
    streams = "".join(o.get("text", "") for cell in book.cells for o in cell.get("outputs", []))
    assert "IProgress not found" not in streams and "TqdmWarning" not in streams
