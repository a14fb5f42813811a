"""Patterns, positions and calibration in; index batches out."""

from ptyacc.data.batches import EpochBatches
from ptyacc.data.dataset import PtychoData, load_data

__all__ = ["EpochBatches", "PtychoData", "load_data"]
