"""The command line: the ``ptyacc`` verbs, and the helpers behind ``info``, ``init`` and the API
reference."""
