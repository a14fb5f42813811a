"""The example notebooks run headless from top to bottom; their results are checked here, from
their printed outputs (a notebook teaches, it holds no asserts), and every figure they draw has
labelled axes (a cell the test adds first records each figure as the inline backend renders it)."""

import re
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

EXAMPLES = Path(__file__).parents[1] / "examples"
NOTEBOOKS = sorted(p.name for p in EXAMPLES.glob("*.ipynb"))
DRAWS = re.compile(r"\b(plt\.subplots|plt\.figure|imshow|make_figures)\(")
NUMBER = r"([-+0-9.e]+)"

# run first in the kernel: each figure the inline backend renders is checked for axes labels;
# an axes drawn with its axis on and a missing label is printed as UNLABELLED
LABEL_CHECK = '''
from matplotlib.backend_bases import FigureCanvasBase as _Canvas

_print_figure = _Canvas.print_figure


def _labelled_print_figure(self, *args, **kwargs):
    for ax in self.figure.axes:
        if ax.axison and (not ax.get_ylabel() or (ax.get_label() != "<colorbar>" and not ax.get_xlabel())):
            print(f"UNLABELLED: an axes titled {ax.get_title()!r}")
    return _print_figure(self, *args, **kwargs)


_Canvas.print_figure = _labelled_print_figure
'''


def outputs_of(name: str, monkeypatch) -> tuple[nbformat.NotebookNode, str]:
    """The notebook ``name`` executed (with LABEL_CHECK first) and all the text it printed."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # runtime.threads: auto picks from the cores and the load
    monkeypatch.delenv("MPLBACKEND", raising=False)
    book = nbformat.read(EXAMPLES / name, as_version=4)
    book.cells.insert(0, nbformat.v4.new_code_cell(LABEL_CHECK))
    start = time.monotonic()
    nbclient.NotebookClient(book, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    print(f"{name}: {time.monotonic() - start:.1f} s")
    errors = [o for cell in book.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    text = "".join(o.get("text", "") for cell in book.cells for o in cell.get("outputs", []))
    return book, text


def found(pattern: str, text: str) -> list[float]:
    """The numbers of the first match of ``pattern`` in ``text`` (it must match)."""
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in the notebook's output:\n{text[-3000:]}"
    return [float(v) for v in match.groups()]


def test_every_notebook_is_committed_without_outputs_or_asserts():
    assert NOTEBOOKS == ["01_quickstart.ipynb", "02_multislice_electron.ipynb", "03_multi_process.ipynb",
                         "04_xray_nearfield.ipynb", "05_watch_a_run.ipynb"]
    for name in NOTEBOOKS:
        book = nbformat.read(EXAMPLES / name, as_version=4)
        code = [cell for cell in book.cells if cell.cell_type == "code"]
        assert all(not cell.get("outputs") for cell in code), name
        assert not any(re.search(r"^\s*assert\b", cell.source, re.M) for cell in code), name
        assert sum(cell.cell_type == "markdown" for cell in book.cells) >= len(code) - 1, name  # text between cells


def check_results(name: str, text: str) -> None:
    """What each notebook must have printed."""
    if name == "01_quickstart.ipynb":
        assert found(r"Poisson deviance per counted pixel " + NUMBER, text)[0] < 3
        assert "object read back identical: True" in text
    elif name == "02_multislice_electron.ipynb":
        assert found(r"depth resolution about λ/α² = " + NUMBER + " Å", text)[0] == 67
        thin = found(r"slices 2 Å apart: projected phase correlation " + NUMBER, text)[0]
        thick = found(r"slices 100 Å apart: projected phase correlation " + NUMBER + r"; slice by slice \(diagonal\) "
                      + " ".join([NUMBER] * 3), text)
        assert thin > 0.9 and thick[0] > 0.9 and min(thick[1:]) > 0.8
    elif name == "03_multi_process.ipynb":
        assert "processes: 1 and 2" in text
        assert found(r"relative difference of the objects: " + NUMBER, text)[0] < 1e-4
    elif name == "04_xray_nearfield.ipynb":
        assert found(r"Poisson deviance per counted pixel " + NUMBER, text)[0] < 30
    elif name == "05_watch_a_run.ipynb":
        assert "loss logged at iterations [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]" in text
        assert "logged loss equals results.h5's: True" in text
        assert "probe pictures at iterations [5, 10]" in text and "poisson_deviance" in text


@pytest.mark.processes  # the notebook runs in a kernel of its own
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, monkeypatch):
    """Each notebook runs, prints the results it should, and every cell that draws shows its
    figure inline with labelled axes: the library leaves the kernel's backend alone (MPLBACKEND
    unset, as in Jupyter) and prints no tqdm warning."""
    book, text = outputs_of(name, monkeypatch)
    check_results(name, text)
    drawing = [cell for cell in book.cells if cell.cell_type == "code" and DRAWS.search(cell.source)]
    for cell in drawing:
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert images, f"{name}: no figure shown by the cell\n{cell.source[:300]}"
    assert "UNLABELLED" not in text, text
    assert "IProgress not found" not in text and "TqdmWarning" not in text
