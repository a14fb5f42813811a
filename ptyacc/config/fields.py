"""What every config section is made of: a field with its line in the reference, and the
check that stops with ``key.path: reason`` (naming the closest allowed word for a misspelling)."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import field
from typing import Any

from ptyacc.errors import ConfigError


def _f(default: Any = dataclasses.MISSING, doc: str = "", factory: Any = None) -> Any:
    """A field with its default (or default factory) and its line in the config reference."""
    if factory is not None:
        return field(default_factory=factory, metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


def _require(ok: bool, path: str, reason: str) -> None:
    """Stop with ``key.path: reason`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"{path}: {reason}")


def _suggest(word: str, choices: Any) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or nothing."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
