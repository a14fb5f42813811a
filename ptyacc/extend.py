"""What a quantity from outside the package needs, at one import path kept stable across versions:
the ``Quantity`` base class and what its hooks receive and return, the optimiser pieces its groups are
made of, the fields of its own config section, and its registration.

A plug-in package declares its quantity in its ``pyproject.toml``::

    [project.entry-points."ptyacc.quantities"]
    pattern_gain = "my_package.gain:PLUGIN"

where ``PLUGIN = QuantityPlugin(factory=make_gain, options=GainOptions)``; a config then names it,
``quantities: {pattern_gain: {lr: 0.05}}``, and every process of a run (one, or those a launcher starts)
finds it through the installed package. In a notebook or a test, ``register_quantity`` does the same for
the running interpreter alone (docs/how-to/add-a-quantity.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ptyacc.config.fields import _f, _require
from ptyacc.config.plugins import ENTRY_POINT_GROUP, NoOptions, QuantityPlugin, add_plugin, remove_plugin
from ptyacc.errors import ConfigError
from ptyacc.optim.autos import AutoPriors
from ptyacc.optim.groups import ParameterGroup, clamp, zero_mean
from ptyacc.optim.row_adam import RowAdam
from ptyacc.quantities.registry import ROOT, BuildContext, ComplexField, Quantity

__all__ = ["ENTRY_POINT_GROUP", "ROOT", "AutoPriors", "BuildContext", "ComplexField", "ConfigError", "NoOptions",
           "ParameterGroup", "Quantity", "QuantityPlugin", "RowAdam", "clamp", "option", "register_quantity",
           "require", "unregister_quantity", "zero_mean"]


def option(default: Any = dataclasses.MISSING, doc: str = "", factory: Callable[[], Any] | None = None) -> Any:
    """A field of a quantity's options dataclass: its default (or ``factory`` for a list or a mapping) and
    its line of documentation. Its type annotation is what the config's value is checked against (int,
    float, bool, str, ``Literal[...]``, lists and unions of those, a nested dataclass)."""
    return _f(default, doc, factory)


def require(ok: bool, key: str, reason: str) -> None:
    """In an options dataclass's ``_check(self, path)``: stop with ``ConfigError('<key>: <reason>')`` unless
    ``ok``; give ``key`` as ``f"{path}.field"`` so the message names the key as the user typed it."""
    _require(ok, key, reason)


def register_quantity(name: str, factory: Callable[[Any, Any, BuildContext], Quantity | None],
                      options: type = NoOptions) -> QuantityPlugin:
    """Make ``factory`` the quantity ``name`` (its options the dataclass ``options``) for the configs
    loaded in this interpreter, as an installed entry point would; returns its ``QuantityPlugin``.
    Processes that a launcher starts do not see it: install the plug-in for those."""
    return add_plugin(name, QuantityPlugin(factory, options))


def unregister_quantity(name: str) -> None:
    """Undo ``register_quantity``."""
    remove_plugin(name)
