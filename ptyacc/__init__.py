"""ptyacc: ptychographic reconstruction by automatic differentiation, on one CPU or many GPUs."""

import ptyacc.version  # noqa: F401  (first: when the import began, run.log's start-up)
import ptyacc.watch.progress  # noqa: F401  (before the rest: tqdm.auto imported without its notebook warning)
from ptyacc.config import Config, load_config
from ptyacc.errors import ConfigError, DataError, DistributedError, OutputError, PtyaccError
from ptyacc.reconstruction.engine import Reconstruction, reconstruct
from ptyacc.results.h5file import Results, load_results
from ptyacc.version import __version__

__all__ = ["Config", "ConfigError", "DataError", "DistributedError", "OutputError", "PtyaccError", "Reconstruction",
           "Results", "__version__", "load_config", "load_results", "reconstruct"]
