"""Quantities from outside the package: each one a name, the dataclass of its config section
``quantities.<name>`` and the factory that makes it (``QuantityPlugin``).

A plug-in is found by name, when a config names it under ``quantities:``: first among those registered
in this interpreter (``add_plugin``; ``ptyacc.extend.register_quantity``), then among the installed
packages' entry points of the group ``ptyacc.quantities`` (``importlib.metadata``), whose name is the
quantity's and whose object is its ``QuantityPlugin``. An entry point is what a launched process
finds as the first one did, since each process loads its config itself; a plug-in no config names is
never imported, so a broken one stops only the runs that ask for it.

This module sits in the config layer: it holds the factory as a callable and calls nothing of it
(``quantities/registry.py``'s ``attach_quantities`` does, once the model is built).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from ptyacc.config.fields import _suggest
from ptyacc.errors import ConfigError

ENTRY_POINT_GROUP = "ptyacc.quantities"
HOW_TO = "docs/how-to/add-a-quantity.md"


@dataclass
class NoOptions:
    """The section of a quantity that takes no options: ``quantities.<name>: {}``."""


@dataclass(frozen=True)
class QuantityPlugin:
    """A quantity from outside the package. ``factory(config, model, context)`` returns its ``Quantity``
    (or None: not in this run), asked once the model is built, after the package's own quantities;
    ``options``: the dataclass of its config section ``quantities.<name>`` (fields made with
    ``ptyacc.extend.option``, an optional ``_check(path)``), which the factory reads as
    ``config.quantities[name]``, built and validated as every other section is."""

    factory: Callable[[Any, Any, Any], Any]
    options: type = NoOptions

    def __post_init__(self) -> None:
        if not callable(self.factory):
            raise TypeError(f"QuantityPlugin.factory must be callable, got {self.factory!r}")
        if not (isinstance(self.options, type) and dataclasses.is_dataclass(self.options)):
            raise TypeError(f"QuantityPlugin.options must be a dataclass, got {self.options!r}")


_REGISTERED: dict[str, QuantityPlugin] = {}  # by name: those added here and the entry points loaded so far


def add_plugin(name: str, plugin: QuantityPlugin) -> QuantityPlugin:
    """Make ``plugin`` the quantity ``name`` for the configs loaded in this interpreter; returns it."""
    if not name.isidentifier():
        raise ValueError(f"a quantity's name is a config key: a Python identifier, got {name!r}")
    if not isinstance(plugin, QuantityPlugin):
        raise TypeError(f"expected a QuantityPlugin for {name!r}, got {plugin!r}")
    _REGISTERED[name] = plugin
    return plugin


def remove_plugin(name: str) -> None:
    """Forget the quantity ``name`` (an installed one is found again by the next config that names it)."""
    _REGISTERED.pop(name, None)


def plugin_names() -> list[str]:
    """The names of the quantities a config may name: those registered here and the installed entry points."""
    return sorted(set(_REGISTERED) | {point.name for point in entry_points(group=ENTRY_POINT_GROUP)})


def find_plugin(name: str, path: str) -> QuantityPlugin:
    """The plug-in of quantity ``name``, loaded from its entry point the first time; ``path``: the config
    key that names it, for the message of a name nobody provides or a plug-in that does not load."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    points = [point for point in entry_points(group=ENTRY_POINT_GROUP) if point.name == name]
    if not points:
        known = plugin_names()
        raise ConfigError(f"{path}: no quantity {name!r} is installed{_suggest(name, known)}; installed: "
                          f"{', '.join(known) or 'none'} (a package adds one under the entry-point group "
                          f"{ENTRY_POINT_GROUP}: {HOW_TO})")
    if len({point.value for point in points}) > 1:
        raise ConfigError(f"{path}: two installed packages provide the quantity {name!r} "
                          f"({', '.join(_origin(point) for point in points)}); uninstall one")
    return add_plugin(name, _load(points[0], path))


def _load(point: EntryPoint, path: str) -> QuantityPlugin:
    try:
        plugin = point.load()
    except Exception as exc:  # the plug-in's own import error, whatever it is, named with its package
        raise ConfigError(f"{path}: the quantity's plug-in {_origin(point)} did not import: "
                          f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(plugin, QuantityPlugin):
        raise ConfigError(f"{path}: the entry point {_origin(point)} must name a ptyacc.extend.QuantityPlugin, "
                          f"got {type(plugin).__name__}")
    return plugin


def _origin(point: EntryPoint) -> str:
    """An entry point as 'module:object (package version)'."""
    dist = getattr(point, "dist", None)
    owner = f" ({dist.name} {dist.version})" if dist is not None else ""
    return f"{point.value}{owner}"
