"""Patterns, positions and calibration in; index batches out."""

from ptyacc.data.batches import EpochBatches, spatial_shards
from ptyacc.data.dataset import PtychoData
from ptyacc.data.load import load_data

__all__ = ["EpochBatches", "PtychoData", "load_data", "spatial_shards"]
