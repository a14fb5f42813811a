"""Measuring this machine's speed: ``ptyacc bench`` (seconds per iteration against the FFT bound),
``ptyacc speedtest`` (the same config on 1, 2, ... processes) and ``ptyacc selftest`` with the
host-device waits it counts (``syncs.py``). The scaling model and the other instruments are the
repository's ``benchmarks/``."""

__all__: list[str] = []  # a folder, not an API: its modules are imported by their full names
