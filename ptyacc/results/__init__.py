"""What a run leaves on disk and how it is read back: results.h5, its figures, run.log, the output
folder's safe writes, TIFF export and the quality measure against a known phase."""

__all__: list[str] = []  # a folder, not an API: its modules are imported by their full names
