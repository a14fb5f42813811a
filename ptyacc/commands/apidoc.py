"""The Python API reference, generated from the docstrings by pdoc (the extra ``ptyacc[docs]``):
``python -m ptyacc.commands.apidoc docs/api`` writes HTML pages for every public module into that
folder (open ``index.html``); ``pdoc ptyacc.reconstruction.engine ptyacc.config ...`` serves them live instead.
Every module is listed explicitly: pdoc follows a package's ``__all__``, and ``ptyacc``'s names
the user-facing functions, not its submodules."""

from __future__ import annotations

import pkgutil
import sys
from pathlib import Path

from ptyacc.errors import OutputError
from ptyacc.version import __version__

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # what it documents, not imported from here: it is the layer above


def public_modules() -> list[str]:
    """Every module of ptyacc whose name has no part starting with an underscore."""
    found = pkgutil.walk_packages([str(PACKAGE_DIR)], prefix="ptyacc.")
    return ["ptyacc", *sorted(m.name for m in found if not any(p.startswith("_") for p in m.name.split(".")))]


def build(output_dir: Path) -> list[Path]:
    """Write the HTML reference into ``output_dir``; the pages written."""
    try:
        import pdoc
    except ImportError:
        raise OutputError("the API reference is made by pdoc: pip install 'ptyacc[docs]'") from None
    pdoc.render.configure(docformat="restructuredtext", footer_text=f"ptyacc {__version__}")
    pdoc.pdoc(*public_modules(), output_directory=Path(output_dir))
    return sorted(Path(output_dir).rglob("*.html"))


if __name__ == "__main__":
    pages = build(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/api"))
    print(f"{len(pages)} pages in {pages[0].parent if pages else sys.argv[1:]}")
