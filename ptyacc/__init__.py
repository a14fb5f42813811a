"""ptyacc: ptychographic reconstruction by automatic differentiation, on one CPU or many GPUs."""

__version__ = "0.1.0"

import ptyacc.watch.progress  # noqa: E402, F401  (first: tqdm.auto imported without its notebook warning)
from ptyacc.config import Config, load_config  # noqa: E402
from ptyacc.errors import ConfigError, DataError, DistributedError, OutputError, PtyaccError  # noqa: E402
from ptyacc.reconstruction.engine import Reconstruction, reconstruct  # noqa: E402
from ptyacc.results.h5file import Results, load_results  # noqa: E402

__all__ = ["Config", "ConfigError", "DataError", "DistributedError", "OutputError", "PtyaccError", "Reconstruction",
           "Results", "__version__", "load_config", "load_results", "reconstruct"]
