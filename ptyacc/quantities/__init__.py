"""Refined quantities that live in a module of their own: ``probe_variation`` (a probe that varies across the scan)."""
