"""From YAML (a file, a dict, or nothing) and ``--set key.path=value`` overrides to a
validated ``Config``: every value is coerced to its field's type, and an unknown key, a wrong
type or a YAML syntax error stops with the key path (or the line) and the reason."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from ptyacc.config.fields import _suggest
from ptyacc.config.plugins import find_plugin
from ptyacc.config.schema import Config
from ptyacc.errors import ConfigError


def load_config(source: str | Path | dict | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Build a validated Config from a YAML file, a dict, or defaults, then apply
    ``section.key=value`` overrides (values parsed as YAML)."""
    base_dir = "."
    if source is None:
        raw: dict = {}
    elif isinstance(source, dict):
        raw = _deep_copy(source)
    else:
        path = Path(source)
        if not path.is_file():
            raise ConfigError(f"{path}: config file not found")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not a text file; a YAML config is expected (a data file goes under "
                              "data.path in the config)") from None
        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: {yaml_error_message(exc, text)}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
        base_dir = str(path.resolve().parent)
    for item in overrides:
        _apply_override(raw, item)
    config = _build(Config, raw, "")
    config.base_dir = base_dir
    scan_configs(config)  # each scan's sections checked where the user typed them
    return config


# input paths resolve against the config file's folder: a config made from another holds them absolute, so that it
# reads the same files from anywhere (a tune trial's folder, best.yaml)
INPUT_PATHS = (("data", "path"), ("data", "flat_field"), ("experiment", "positions", "path"), ("model", "init_from"),
               ("model", "probe_init", "path"))


def portable(config: Config) -> dict:
    """``config`` as a dict whose input paths and output.dir are absolute."""
    raw = config.to_dict()
    # each of several scans overrides the data and experiment sections, paths included
    for section in [raw, *(raw.get("scans") or [])]:
        for keys in INPUT_PATHS:
            node = section
            for key in keys[:-1]:
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict) and node.get(keys[-1]):
                node[keys[-1]] = str(config.resolve_input(node[keys[-1]]).resolve())
    raw["output"]["dir"] = str(Path(raw["output"]["dir"]).resolve())
    return raw


def with_values(config: Config, values: dict[str, Any]) -> Config:
    """``config`` with each dotted key of ``values`` (e.g. ``optim.lr.object``) set, validated as a loaded config
    is; its input paths and output.dir made absolute (``portable``), any other path resolved as ``config``'s."""
    raw = portable(config)
    for key, value in values.items():
        *sections, name = key.split(".")
        node = raw
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    made = load_config(raw)
    made.base_dir = config.base_dir
    return made


def scan_configs(config: Config) -> list[Config]:
    """The whole config of each of ``config.scans`` (none without them): the top-level config
    with the scan's ``data`` and ``experiment`` keys replacing the top-level ones (nested
    sections key by key) and ``scans`` left out; an error names the scan and the key."""
    if config.scans and config.model.probe_variation:
        raise ConfigError("model.probe_variation: a varying probe is not made for several scans (each has its own "
                          "probe); leave it 0 with scans")
    configs = []
    for number, scan in enumerate(config.scans or []):
        raw = config.to_dict()
        raw.pop("scans")
        if "path" in scan.data or "simulate" in scan.data:  # a scan's own source replaces the top-level one
            raw["data"].pop("simulate" if "path" in scan.data else "path", None)
        for section in ("data", "experiment"):
            _merge(raw[section], _deep_copy(getattr(scan, section)))
        try:
            whole = _build(Config, raw, "")
        except ConfigError as exc:
            raise ConfigError(f"scans[{number}].{exc}") from None
        whole.base_dir = config.base_dir
        configs.append(whole)
    return configs


def _merge(base: dict, update: dict) -> None:
    """``update``'s keys into ``base``, in place; a mapping into a mapping key by key."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def yaml_error_message(exc: yaml.YAMLError, text: str) -> str:
    """One line for a YAML syntax error: where the parser stopped (1-based line and column),
    what it expected, the text of that line, and where the construct it was reading began
    when that is on another line (an unclosed bracket is noticed only lines later)."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:  # not a syntax error with a position (e.g. a bad character encoding)
        return f"not valid YAML ({str(exc).splitlines()[0]})"
    lines = text.splitlines()
    problem = (getattr(exc, "problem", None) or "syntax error").replace("\n", " ")
    if "'\\t'" in problem:
        problem += "; indent with spaces, not tabs"
    message = (f"not valid YAML at line {mark.line + 1}, column {mark.column + 1} "
               f"({_quote_line(lines, mark.line)}): {problem}")
    start = getattr(exc, "context_mark", None)
    context = getattr(exc, "context", None)
    if context and start is not None and start.line != mark.line:
        message += (f" ({context} that starts at line {start.line + 1}, column {start.column + 1}: "
                    f"{_quote_line(lines, start.line)})")
    elif context:
        message += f" ({context})"
    return message


def _quote_line(lines: list[str], index: int, width: int = 60) -> str:
    """A config line as the user typed it, quoted, cut to ``width`` characters."""
    if index >= len(lines):
        return "end of file"
    line = lines[index].rstrip()
    return repr(line if len(line) <= width else line[:width] + "...")


def _apply_override(raw: dict, item: str) -> None:
    if "=" not in item:
        raise ConfigError(f"--set {item}: expected key.path=value, e.g. optim.iterations=5")
    key, text = item.split("=", 1)
    parts = key.strip().split(".")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    node = raw
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {} if child is None or child == "raster" else child
            if not isinstance(child, dict):
                raise ConfigError(f"--set {key}: {part} is not a section")
            node[part] = child
        node = child
    node[parts[-1]] = value


def _deep_copy(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _deep_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_deep_copy(v) for v in obj]
    return obj


def _build(cls: type, raw: Any, path: str) -> Any:
    where = path or "config"
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of keys, got {type(raw).__name__} {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    for key in raw:
        if key not in fields:
            raise ConfigError(f"{_join(path, str(key))}: unknown key{_suggest(str(key), fields)}; "
                              f"allowed: {', '.join(fields)}")
    values = {name: _plugin_sections(raw[name], _join(path, name)) if fields[name].metadata.get("plugin_sections")
              else _coerce(raw[name], hints[name], _join(path, name)) for name in fields if name in raw}
    obj = cls(**values)
    check = getattr(obj, "_check", None)
    if check is not None:
        check(where)
    return obj


def _plugin_sections(raw: Any, path: str) -> dict[str, Any]:
    """``quantities:``, {name: options}: each name a plug-in's (``plugins.find_plugin``), its options built
    as a section of the plug-in's own dataclass (unknown keys, types and its ``_check`` as everywhere)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of quantity names to their options, got {raw!r}")
    return {str(name): _build(find_plugin(str(name), _join(path, str(name))).options, options, _join(path, str(name)))
            for name, options in raw.items()}


def _coerce(value: Any, tp: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        # a mapping can only mean a section: its own error names the key inside it
        sections = [a for a in options if dataclasses.is_dataclass(a)]
        if len(options) == 1 or (isinstance(value, dict) and len(sections) == 1):
            return _coerce(value, sections[0] if isinstance(value, dict) and sections else options[0], path)
        errors = []
        for option in options:
            try:
                return _coerce(value, option, path)
            except ConfigError as exc:
                errors.append(str(exc).split(": ", 1)[-1])
        raise ConfigError(f"{path}: {' or '.join(errors)}")
    if origin is Literal:
        if value is False and "off" in args:  # YAML 1.1 reads a bare off as false
            return "off"
        if value in args:
            return value
        hint = _suggest(str(value), [str(a) for a in args])
        raise ConfigError(f"{path}: must be one of {', '.join(map(str, args))}, got {value!r}{hint}")
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {value!r}")
        return [_coerce(v, args[0], f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        return {str(k): _coerce(v, args[1], f"{path}.{k}") for k, v in value.items()}
    if tp is Any:  # checked where it is used (a scan's sections: ``scan_configs``)
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{path}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{path}: expected an integer, got {value!r}")
    if tp is float:
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
        if number is not None and not math.isfinite(number):  # no setting means anything at inf or NaN
            raise ConfigError(f"{path}: expected a finite number, got {value!r}")
        if number is not None:
            return number
        raise ConfigError(f"{path}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{path}: expected a string, got {value!r}")
    raise TypeError(f"unsupported config type {tp} at {path}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
