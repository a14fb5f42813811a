"""Patterns, positions and calibration in; index batches out."""

from ptyacc.data.dataset import PtychoData
from ptyacc.data.load import load_data
from ptyacc.data.store import EpochBatches, spatial_shards

__all__ = ["EpochBatches", "PtychoData", "load_data", "spatial_shards"]
