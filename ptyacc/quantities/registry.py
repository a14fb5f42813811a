"""Refined quantities in modules of their own, and the registry through which a run finds them.

A quantity is a ``Quantity`` (an ``nn.Module``: its parameters and buffers registered, so that
DDP, checkpoints and the object split carry them) that says what it does to the forward model
and how it is refined:
- ``probes(probe, indices, probe_scale)``: the probe modes of a batch's positions, given those so
  far ((P, K, K) shared by the batch, or (B, P, K, K) per position; the fused data term takes
  either); the default leaves them;
- ``centres(centres, indices, scan_shift_px)``: the probe centres (B, 2) px of a batch's positions,
  given those so far (the nominal ones first, moved by ``scan_shift_px`` with the probe's
  recentring); the default leaves them. Only a model built with ``refine_positions`` asks;
- ``intensity_factor(indices)``: (B,) a factor of each predicted pattern, or None (the default);
- ``added_background()``: (K, K) counts added to every predicted pattern (unshifted layout), or None;
- ``exit_ramp(indices)``: (B, K, K) complex64 factors of each position's exit wave (after the last
  slice, before the detector: a phase ramp moves the pattern on the detector), or None (the default);
  the model multiplies those of its quantities;
- ``floor_share(indices)``: (B,) each pattern's share of the loss's floor (``physics/chain.py``'s
  ``intensity_loss_terms``: several scans of one object, ``scans.py``), or None (the default: all of it);
- ``detection(detector)``: the model's ``Detector`` with what this quantity changes in it (a point
  spread); the default leaves it;
- ``groups(config, model, priors)``: its optimizer groups (``ParameterGroup``: parameters, learning rate,
  start iteration, optimizer, what runs after each step and iteration); ``priors`` (``AutoPriors``):
  what the run's auto keys came to (the object's and the probe's optimizer, ...); a ``groups(config, model)``
  of the earlier protocol is still asked without them;
- ``saved(model)``: {name: array}, results.h5's group ``results_group`` (``Results.quantities``;
  by default the quantity's ``name``; several quantities may write into one group, as ``fitted``;
  ``ROOT``, "/": results.h5's top level, fields of ``Results``, as the object's ``/object``);
- ``attributes(model)``: {name: number}, attributes of results.h5 (``Results.attrs``).

The forward calls only the hooks (``probes`` to ``detection``) that a quantity's class defines itself
(``PtychoModel.quantities_with``; the saver too, for ``saved`` and ``attributes``): a quantity without
one, as the object and the probe in the forward, costs it nothing.

The object and the probe (``object.py``, ``probe.py``) are the quantities every model is built with,
first (``reconstruction/initial.py``'s ``build_model``), both ``ComplexField``s (one complex field,
saved at the top level). A factory ``(config, model, context) ->
Quantity | None`` registered with ``register`` is asked, once the model is built (``build_model``,
which passes a ``BuildContext``), whether the run has its quantity; the model keeps the quantities it
is given in ``model.quantities`` (by name, the object and the probe first, the others in registration
order) and applies them in that order. The package registers the position offsets and scan affine (``positions.py``),
the fitted background and intensity weights (``detector_fit.py``), a varying probe
(``probe_variation.py``), the probes of several scans (``scans.py``), the detector's blur
(``detector_blur.py``) and the descan's ramp on the exit waves (``descan_ramp.py``); a quantity
defined elsewhere (a test, a notebook) registers its own factory, and nothing in the package
changes (docs/explanation/architecture.md, "Adding a quantity"). A quantity of an installed plug-in,
with a config section of its own, is made by its factory when the config names it under
``quantities:`` (``ptyacc.extend``, docs/how-to/add-a-quantity.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ptyacc.config.plugins import find_plugin

if TYPE_CHECKING:
    from ptyacc.config import Config
    from ptyacc.optim.autos import AutoPriors
    from ptyacc.optim.groups import ParameterGroup
    from ptyacc.physics import Detector
    from ptyacc.quantities.model import PtychoModel



@dataclass
class BuildContext:
    """What a factory may read besides the config and the model: the run's ``data`` (``PtychoData``)
    and object ``geometry`` (``ObjectGeometry``), its ``scans`` (``scans.Scan``, several scans of
    one object) or None, ``make_probe(config, data)``: initial probe modes (P, K, K) as the model's
    were made, for another scan's config and data; ``said``: run.log's lines, to add to;
    ``mean_intensity``: the data's mean counts per pattern (None: not known)."""

    data: Any
    geometry: Any
    scans: list | None = None
    make_probe: Callable[[Config, Any], torch.Tensor] | None = None
    said: list[str] = field(default_factory=list)
    mean_intensity: float | None = None


ROOT = "/"  # a ``results_group``: results.h5's top level, whose arrays are fields of ``Results``

Factory = Callable[["Config", "PtychoModel", BuildContext], "Quantity | None"]
FACTORIES: list[Factory] = []


class Quantity(nn.Module):
    """A refined quantity (module docstring); ``name``, unique, is its key in ``model.quantities``
    (its state's ``quantities.<name>.``) and, unless ``results_group`` says another, its results.h5 group."""

    name = "quantity"
    results_group: str | None = None

    def probes(self, probe: torch.Tensor, indices: torch.Tensor, probe_scale: torch.Tensor) -> torch.Tensor:
        return probe

    def centres(self, centres: torch.Tensor, indices: torch.Tensor, scan_shift_px: torch.Tensor) -> torch.Tensor:
        return centres

    def intensity_factor(self, indices: torch.Tensor) -> torch.Tensor | None:
        return None

    def added_background(self) -> torch.Tensor | None:
        return None

    def exit_ramp(self, indices: torch.Tensor) -> torch.Tensor | None:
        return None

    def floor_share(self, indices: torch.Tensor) -> torch.Tensor | None:
        return None

    def detection(self, detector: Detector) -> Detector:
        return detector

    def groups(self, config: Config, model: PtychoModel, priors: AutoPriors) -> list[ParameterGroup]:
        return []

    def saved(self, model: PtychoModel) -> dict[str, np.ndarray]:
        return {}

    def attributes(self, model: PtychoModel) -> dict[str, float]:
        return {}


class ComplexField(Quantity):
    """A quantity that is one complex field, stored as real and imaginary pairs (..., 2) in its tensor
    ``tensor_name``, divided by its buffer ``scale_name`` where it has one: the object and the probe.
    results.h5 keeps it at the top level (``ROOT``) under its ``name``, complex64."""

    results_group = ROOT
    tensor_name = "field"
    scale_name: str | None = None

    def saved(self, model: PtychoModel) -> dict[str, np.ndarray]:
        field = torch.view_as_complex(getattr(self, self.tensor_name).detach())
        if self.scale_name is not None:
            field = field * getattr(self, self.scale_name)
        return {self.name: field.cpu().numpy()}


def register(factory: Factory) -> Factory:
    """Add ``factory`` to those asked when a model is built (usable as a decorator); returns it."""
    FACTORIES.append(factory)
    return factory


def unregister(factory: Factory) -> None:
    FACTORIES.remove(factory)


def attach_quantities(config: Config, model: PtychoModel, context: BuildContext) -> None:
    """Give ``model`` the quantity of every registered factory that makes one for this run, then those of
    the plug-ins its config names under ``quantities:`` (``config/plugins.py``), in the config's order."""
    plugins = [find_plugin(name, f"quantities.{name}").factory for name in config.quantities]
    for factory in [*FACTORIES, *plugins]:
        quantity = factory(config, model, context)
        if quantity is not None:
            if quantity.name in model.quantities:
                raise ValueError(f"two quantities are named {quantity.name!r}")
            model.quantities[quantity.name] = quantity
