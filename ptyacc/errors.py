"""Exceptions a user can cause, or a file system can. The CLI prints them on one line and exits
with code 2."""


class PtyaccError(Exception):
    """Base class for errors caused by input (config, data files, launcher set-up)."""


class ConfigError(PtyaccError):
    """A config key is unknown, has the wrong type, or an impossible value."""


class DataError(PtyaccError):
    """A data file is missing, unreadable, or holds something other than what was expected."""


class DistributedError(PtyaccError):
    """The processes of a multi-process run are set up wrongly or have drifted apart."""


class OutputError(PtyaccError):
    """A file could not be written (a full disk, no permission), or the output folder is in use
    by another run."""
