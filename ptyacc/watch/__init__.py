"""Watching a run as it goes: progress bars, and experiment trackers with their pictures."""
