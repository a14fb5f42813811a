"""ptyacc: ptychographic reconstruction by automatic differentiation, on one CPU or many GPUs."""

import ptyacc.watch.progress  # noqa: F401  (first: tqdm.auto imported without its notebook warning)

# the old module paths that ``import ptyacc`` made attributes before the folders (``ptyacc.engine.Reconstruction``)
from ptyacc import (  # noqa: F401
    checkpoint,
    distributed,
    engine,
    exchange,
    figures,
    geometry,
    groups,
    hooks,
    initial,
    interrupt,
    model,
    outdir,
    output,
    progress,
    recenter,
    runlog,
    saving,
    slices,
    tiles,
    validation,
)
from ptyacc.config import Config, load_config
from ptyacc.errors import ConfigError, DataError, DistributedError, OutputError, PtyaccError
from ptyacc.reconstruction.engine import Reconstruction, reconstruct
from ptyacc.results.h5file import Results, load_results
from ptyacc.version import __version__

__all__ = ["Config", "ConfigError", "DataError", "DistributedError", "OutputError", "PtyaccError", "Reconstruction",
           "Results", "__version__", "load_config", "load_results", "reconstruct"]
