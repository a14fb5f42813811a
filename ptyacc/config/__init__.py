"""The YAML config: the schema (``schema.py``, one dataclass per section: what a user reads),
loading with validation and overrides (``loading.py``), and the generated reference
(``reference.py``). Everything is imported from here: ``from ptyacc.config import Config``."""

from ptyacc.config.loading import load_config, with_values, yaml_error_message
from ptyacc.config.reference import config_reference
from ptyacc.config.schema import (
    ABERRATION_NAMES,
    Config,
    DataConfig,
    ExperimentConfig,
    LearningRates,
    ModelConfig,
    OptimConfig,
    OutputConfig,
    PositionsFileConfig,
    RegularizeConfig,
    RuntimeConfig,
    SimulateConfig,
    StartIterations,
    TransformConfig,
)
from ptyacc.config.upsample import resolved_upsample

__all__ = [
    "ABERRATION_NAMES", "Config", "DataConfig", "ExperimentConfig", "LearningRates", "ModelConfig", "OptimConfig",
    "OutputConfig", "PositionsFileConfig", "RegularizeConfig", "RuntimeConfig", "SimulateConfig", "StartIterations",
    "TransformConfig",
    "config_reference", "load_config", "resolved_upsample", "with_values", "yaml_error_message",
]
