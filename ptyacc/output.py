"""Kept for the old path ``ptyacc.output``: results.h5 is ``ptyacc.results.h5file`` and the figures
``ptyacc.results.figures``; the names this module offered are theirs."""

from ptyacc.results.figures import FIGURE_ADVICE, length_unit, save_figures
from ptyacc.results.figures import complex_to_rgb as _complex_to_rgb
from ptyacc.results.h5file import COUNTS, METRE_PER_A, Results, load_results, save_results, versions

__all__ = ["COUNTS", "FIGURE_ADVICE", "METRE_PER_A", "Results", "_complex_to_rgb", "length_unit", "load_results",
           "save_figures", "save_results", "versions"]
