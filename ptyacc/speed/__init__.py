"""Measuring and predicting speed: ``ptyacc bench`` and ``speedtest``, the scaling model, its
extension to the split object and its check against this machine."""

__all__: list[str] = []  # a folder, not an API: its modules are imported by their full names
