"""The API reference builds from the docstrings (so it cannot rot) and covers every module."""

import pytest

from ptyacc.commands.apidoc import build, public_modules

pytest.importorskip("pdoc")


@pytest.mark.processes
def test_the_api_reference_builds_with_a_page_per_module(tmp_path):
    pages = build(tmp_path)
    names = {str(p.relative_to(tmp_path).with_suffix("")).replace("/", ".") for p in pages}
    assert set(public_modules()) <= names
    assert {"ptyacc", "ptyacc.reconstruction.engine", "ptyacc.data.sanity", "ptyacc.data.formats.rsciio"} <= names
    page = (tmp_path / "ptyacc" / "data" / "sanity.html").read_text()
    assert "Physical sanity checks of a calibration against the data" in page and "check_bright_field" in page
