"""Progress bars that suit where the run is watched: a terminal, or a Jupyter notebook (tqdm's
widget when ipywidgets is installed, else its text bar), without tqdm's "IProgress not found"
warning, which ``tqdm.auto`` gives in a kernel without ipywidgets on its first import (accelerate
imports it too, so ptyacc imports it first, once, with that warning silenced)."""

from __future__ import annotations

import builtins
import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="IProgress not found")
    from tqdm.auto import tqdm


def in_notebook() -> bool:
    """True inside IPython (a Jupyter kernel: stderr is no terminal there, yet a bar is wanted)."""
    return hasattr(builtins, "__IPYTHON__")


def progress_bar(**options) -> tqdm:
    """A tqdm bar (widget or text, see the module docstring)."""
    return tqdm(**options)
