"""The parameter groups of a run: each quantity's own (``quantity.groups``, ``ptyacc/quantities/``), then the
tilt's and the slice thickness's, each given Adam where it brings no optimizer of its own and the run's one
learning-rate schedule. The groups themselves, their projections and optimizers are ``ptyacc/optim/``'s."""

from __future__ import annotations

import inspect

import torch
from torch import nn

from ptyacc.config import Config
from ptyacc.optim.autos import AutoPriors, resolved_final_fraction
from ptyacc.optim.groups import LrSchedule, ParameterGroup, fast_adam
from ptyacc.quantities.model import PtychoModel


def build_groups(config: Config, model: PtychoModel, device: torch.device,
                 auto: AutoPriors | None = None) -> list[ParameterGroup]:
    """The groups of ``model`` as ``config.optim`` and ``config.model`` describe them: each quantity's
    (``model.quantities``, the object and the probe first, each stepped by the optimizer ``auto`` chose:
    Adam or the preconditioned descent), then the tilt's and the slice thickness's; Adam (the fused
    kernel where ``device`` has one) for every group that brings no optimizer of its own. ``auto``: what the
    config's auto keys came to (``AutoPriors.of(config)`` when not given)."""
    auto = AutoPriors.of(config) if auto is None else auto
    fast, beta2 = fast_adam(device), auto.beta2
    schedule = LrSchedule(config.optim.iterations, resolved_final_fraction(config))
    groups = [group for quantity in model.quantities.values() for group in _groups_of(quantity, config, model, auto)]
    if model.propagation is not None:  # the tilt and the slice thickness (quantities/slices.py)
        groups += model.propagation.groups(config, model)
    for group in groups:
        if group.optimizer is None:  # every group but a preconditioned object or probe
            group.optimizer = torch.optim.Adam(group.params, lr=group.lr, betas=(0.9, beta2), **fast)
        group.schedule = schedule
    return groups


def _groups_of(quantity: nn.Module, config: Config, model: PtychoModel, priors: AutoPriors) -> list[ParameterGroup]:
    """``quantity.groups(config, model, priors)``; a quantity written for the earlier protocol, whose ``groups``
    takes (config, model) only, is asked that way."""
    if len(inspect.signature(quantity.groups).parameters) == 2:
        return quantity.groups(config, model)
    return quantity.groups(config, model, priors)
