"""Pattern file formats, one module each, and the table that names them.

A format module has:

- ``KIND``: what a file of it is called in messages ("a CXI file")
- ``EXTENSIONS``: the file name endings that choose it
- ``MAGIC``: the bytes its files start with, for a file whose extension says nothing (None: the
  HDF5 formats, recognised by opening the file; a CXI file is an HDF5 file with an entry_1 group)
- ``open_file(path, options)``: a context manager giving the open file, handed to the two below
- ``inspect(opened, path, key, options) -> PatternsInfo``: what the file holds, in one pass and
  no patterns read: shape, scan shape, calibration, the file's mask, dark frame and probe
  positions when it has them, and the dataset ``options.positions_key`` names (HDF5 formats)
- ``read(opened, path, info, options, prepare, rows) -> RawPatterns``: the patterns ``rows`` as
  float32 (n, ky, kx), each chunk through ``prepare`` (see ``chunks.copy_rows``), with what
  ``inspect`` found beside them

Adding a format is adding such a module and its line in ``READERS``; ``ptyacc.data.readers``
chooses the format of a file and opens it once.
"""

from ptyacc.data.formats import cxi, empad, hdf5, mat, npy, rsciio
from ptyacc.data.formats.common import PatternsInfo, RawPatterns, ReadOptions

READERS = {"hdf5": hdf5, "cxi": cxi, "npy": npy, "mat": mat, "empad": empad, "rsciio": rsciio}

__all__ = ["READERS", "PatternsInfo", "RawPatterns", "ReadOptions"]
