"""The docs site builds from docs/ with warnings as errors (`mkdocs build --strict`: a broken link or
anchor, a page missing from the nav, a notebook that does not render, an API or CLI reference that
does not generate), and what it generates is there: every CLI verb, the API's entry points, the
notebooks. Needs the `docs` tools (in the `test` extra); skipped with the reason when they are missing."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
TOOLS = ("mkdocs", "material", "mkdocs_jupyter", "mkdocs_click", "mkdocstrings", "mkdocstrings_handlers.python")


def docs_tools_missing() -> str | None:
    import importlib.util

    missing = [name for name in TOOLS if importlib.util.find_spec(name.split(".")[0]) is None]
    return f"the docs tools are not installed ({', '.join(missing)}): pip install -e '.[docs]'" if missing else None


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=config.parent, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


@pytest.mark.slow
@pytest.mark.skipif(docs_tools_missing() is not None, reason=str(docs_tools_missing()))
def test_the_site_builds_strictly_with_its_generated_pages(tmp_path):
    from ptyacc.commands.cli import cli

    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    site = tmp_path / "site"
    cli_page = (site / "reference" / "cli" / "index.html").read_text()
    assert all(f"ptyacc {verb}" in cli_page for verb in cli.commands), "a CLI verb is missing from the reference"
    api_page = (site / "reference" / "api" / "index.html").read_text()
    assert all(name in api_page for name in ("load_config", "reconstruct", "load_results", "best_shift_ncc"))
    for notebook in (ROOT / "examples").glob("*.ipynb"):
        assert (site / "tutorials" / "notebooks" / notebook.stem / "index.html").is_file(), notebook.name
    assert "raw_scan.h5" in (site / "tutorials" / "own-data" / "index.html").read_text()


@pytest.mark.skipif(docs_tools_missing() is not None, reason=str(docs_tools_missing()))
def test_a_broken_anchor_fails_the_strict_build(tmp_path):
    """The site's own validation settings turn a link to a missing heading into an error."""
    import yaml

    validation = yaml.safe_load((ROOT / "mkdocs.yml").read_text().split("\nnav:")[0].replace("!!python", "#"))["validation"]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the other page](other.md#no-such-heading).\n")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A heading\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(yaml.safe_dump({"site_name": "t", "validation": validation, "nav": ["index.md", "other.md"]}))
    assert build(config, tmp_path / "site").returncode != 0
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the other page](other.md#a-heading).\n")
    assert build(config, tmp_path / "site").returncode == 0
