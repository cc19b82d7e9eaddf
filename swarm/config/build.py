"""Building a `Config` from a nested mapping (as read from TOML): unknown sections and keys,
types, choices and bounds, each error naming the file (or override) and the key on one line.

Rules that involve more than one key are `swarm.config.validate`'s.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from collections.abc import Mapping
from typing import Any

from swarm.config.renames import retired
from swarm.config.schema import SECTIONS, Config
from swarm.config.validate import check_cross_field
from swarm.core.errors import ConfigError


def who_set(origins: Mapping[tuple[str, str], str], source: str, *keys: str) -> str:
    """Who set these `section.key`s, for an error message: the strongest setter among them
    (a flag such as --rounds, then --set, then an env var, then the file); `source` (the
    file, or "defaults") if none of them was set."""
    pairs = [(section, name) for section, _, name in (key.partition(".") for key in keys)]
    found = [origins[k] for k in pairs if k in origins]
    return max(found, key=_origin_rank, default=source)


def _origin_rank(origin: str) -> int:
    if origin == "--set":
        return 2
    if origin.startswith("--"):
        return 3  # a dedicated flag such as --rounds
    return 1 if origin.startswith("environment variable") else 0


def build_config(
    raw: Mapping[str, Any], source: str = "config", origins: Mapping | None = None
) -> Config:
    """Validate a nested mapping (as read from TOML) into a `Config`.

    `source` names the file in error messages; `origins` maps (section, key) to where an
    override came from ("--set", an env var) so its errors name that instead.
    """
    origins = origins or {}
    sections = {}
    for section_name, section_data in raw.items():
        if section_name not in SECTIONS:
            where = next((o for (s, _), o in origins.items() if s == section_name), source)
            raise ConfigError(
                f"{where}: unknown section [{section_name}]{_suggest(section_name, SECTIONS)}"
            )
        if not isinstance(section_data, Mapping):
            raise ConfigError(f"{source}: [{section_name}] must be a table")
        sections[section_name] = _build_section(
            SECTIONS[section_name], section_name, section_data, source, origins
        )
    config = Config(**sections)
    check_cross_field(
        config, lambda section, key, *also: who_set(origins, source, f"{section}.{key}", *also)
    )
    return config


def _build_section(cls: type, section: str, data: Mapping[str, Any], source: str, origins: Mapping):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in data.items():
        origin = origins.get((section, key), source)
        where = f"{origin}: {section}.{key}"
        if key not in fields:
            news = retired(section, key)
            if news:
                raise ConfigError(f"{origin}: {news}")
            raise ConfigError(f"{origin}: unknown key {section}.{key}{_suggest(key, fields)}")
        values[key] = _check_value(value, hints[key], fields[key].metadata, where)
    return cls(**values)


def _check_value(value: Any, expected: Any, meta: Mapping[str, Any], where: str) -> Any:
    if expected == int | str:  # a number, or one of the key's words ("auto")
        return _check_number_or_word(value, meta, where)
    value = _check_type(value, expected, where)
    if meta.get("choices") and value not in meta["choices"]:
        raise ConfigError(
            f"{where}: {value!r} is not one of {', '.join(map(str, meta['choices']))}"
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        if meta.get("min") is not None and value < meta["min"]:
            raise ConfigError(f"{where}: {value} is below the minimum {meta['min']}")
        if meta.get("max") is not None and value > meta["max"]:
            raise ConfigError(f"{where}: {value} is above the maximum {meta['max']}")
    return value


def _check_number_or_word(value: Any, meta: Mapping[str, Any], where: str) -> Any:
    words = meta.get("choices", ())
    if isinstance(value, str) and value in words:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        said = " or ".join(repr(w) for w in words)
        raise ConfigError(f"{where}: expected an integer or {said}, got {value!r}")
    return _check_value(value, int, {**meta, "choices": ()}, where)


def _check_type(value: Any, expected: Any, where: str) -> Any:
    if expected is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if expected is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if expected is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number, got {value!r}")
        return float(value)
    if expected is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if expected is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return list(value)
    raise ConfigError(f"{where}: unsupported config type {expected}")  # a bug in a section class


def _suggest(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
