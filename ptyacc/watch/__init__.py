"""Watching a run as it goes: progress bars, and experiment trackers with their pictures."""

__all__: list[str] = []  # a folder, not an API: its modules are imported by their full names
