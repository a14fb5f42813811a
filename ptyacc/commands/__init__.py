"""The command line: the ``ptyacc`` verbs, and the helpers behind ``info``, ``init`` and the API
reference."""

__all__: list[str] = []  # a folder, not an API: its modules are imported by their full names
