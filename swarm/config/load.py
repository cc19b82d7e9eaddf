"""Reading a config: the TOML file, then env vars, --set overrides and a command's flags.

`load_with_origins` returns the validated `Config` (`swarm.config.build_config`) with where
each key that was set came from (the file, an env var, --set, a flag such as --rounds), so
errors found later, by `swarm.config.preflight`, blame the right one.

Paths come out absolute: a relative `node.run_dir`, `p2p.psk_file` or SQLite `ledger.url`
in a config file is relative to that file's folder, so a folder of configs (a private
cluster's) keeps working wherever it is moved; one given by an env var, --set or a flag is
relative to the working directory, as a shell user expects. An override that should be a
list but is not valid TOML (the shell ate its quotes) is refused with that explanation.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarm.config.build import build_config, who_set
from swarm.config.schema import SECTIONS, Config
from swarm.core.errors import ConfigError

ENV_PREFIX = "SWARM__"


@dataclass(frozen=True)
class LoadedConfig:
    """A loaded config and where each key that was set came from (file, env var, --set, a flag)."""

    config: Config
    source: str  # the config file, or "defaults"
    origins: Mapping[tuple[str, str], str]

    def where(self, *keys: str) -> str:
        """Who set these `section.key`s (`swarm.config.who_set`), to name in an error."""
        return who_set(self.origins, self.source, *keys)


def load_with_origins(
    path: str | os.PathLike | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, tuple[str, Any]] | None = None,
) -> LoadedConfig:
    """`load_config`, keeping where each key came from.

    Path keys (`node.run_dir`, `p2p.psk_file`, a relative SQLite `ledger.url`) come out
    absolute: relative ones in the file are relative to the file's folder (so a folder of
    configs can move), relative ones from env vars, --set or flags to the working directory.
    """
    raw: dict[str, dict[str, Any]] = {}
    origins: dict[tuple[str, str], str] = {}  # where each key set came from, for errors
    source = "defaults"
    if path is not None:
        source = str(path)
        raw = _read_toml(Path(path))
        _resolve_paths(raw, Path(path).parent)
        for section, values in raw.items():
            for key in values if isinstance(values, dict) else ():
                origins[(section, key)] = source
    env = os.environ if env is None else env
    for key, value in env.items():
        # SWARM__<SECTION>__<KEY>: a prefix no other variable of ours (SWARM_NODE_CACHE) shares.
        if key.startswith(ENV_PREFIX):
            section, sep, name = key[len(ENV_PREFIX) :].lower().partition("__")
            origin = f"environment variable {key}"
            if not sep or not name:
                raise ConfigError(f"{origin}: expected {ENV_PREFIX}<SECTION>__<KEY>")
            _set_dotted(
                raw,
                origins,
                f"{section}.{name}",
                _parse_override(section, name, value, origin),
                origin,
            )
    for item in overrides:
        dotted, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r}: expected section.key=value")
        section, _, name = dotted.strip().partition(".")
        _set_dotted(
            raw,
            origins,
            dotted.strip(),
            _parse_override(section, name, value.strip(), "--set"),
            "--set",
        )
    for dotted, (flag, value) in (flags or {}).items():
        _set_dotted(raw, origins, dotted, value, flag)
    for section, cls in SECTIONS.items():  # defaults too, so every path key comes out absolute
        for f in dataclasses.fields(cls):
            if f.metadata.get("path") and isinstance(raw.get(section, {}), dict):
                raw.setdefault(section, {}).setdefault(f.name, f.default)
    _resolve_paths(raw, Path.cwd())
    return LoadedConfig(build_config(raw, source, origins), source, origins)


def _read_toml(path: Path) -> dict:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None


def _set_dotted(raw: dict, origins: dict, dotted: str, value: Any, origin: str) -> None:
    section, sep, key = dotted.partition(".")
    if not sep or not key:
        raise ConfigError(f"{origin}: expected section.key, got {dotted!r}")
    raw.setdefault(section, {})
    if not isinstance(raw[section], dict):
        raise ConfigError(f"{origin}: [{section}] is not a table")
    raw[section][key] = value
    origins[(section, key)] = origin


def _resolve_paths(raw: dict, base: Path) -> None:
    """Make the path keys in `raw` absolute: `~` expanded, relative ones joined to `base`."""
    for section, values in raw.items():
        cls = SECTIONS.get(section)
        if cls is None or not isinstance(values, dict):
            continue  # reported by build_config
        for f in dataclasses.fields(cls):
            value = values.get(f.name)
            if f.metadata.get("path") and isinstance(value, str) and value:
                values[f.name] = os.path.normpath(base / os.path.expanduser(value))
    ledger = raw.get("ledger")
    url = ledger.get("url") if isinstance(ledger, dict) else None
    if (
        isinstance(ledger, dict)
        and isinstance(url, str)
        and url.startswith(_SQLITE)
        and not url.startswith(_SQLITE + "/")
    ):
        rest = url[len(_SQLITE) :]
        if rest and not rest.startswith(":memory:"):
            ledger["url"] = _SQLITE + os.path.normpath(base / os.path.expanduser(rest))


_SQLITE = "sqlite:///"


def _parse_override(section: str, key: str, text: str, origin: str) -> Any:
    """An env var's or --set value as a TOML literal, else as a plain string (type-checked later).

    A list that is no TOML literal is refused here, naming the likely cause: the shell ate
    the quotes of the strings inside it."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        pass
    cls = SECTIONS.get(section)
    if cls is not None and typing.get_type_hints(cls).get(key) is list:
        raise ConfigError(
            f"{origin}: {section}.{key}: {text!r} is not a TOML list: quote the strings in it "
            f"and the whole value for the shell, e.g. --set '{section}.{key}=[\"...\"]'"
        )
    return text


def load_config(
    path: str | os.PathLike | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, tuple[str, Any]] | None = None,
) -> Config:
    """The config from `path` (or defaults), then env vars (`SWARM__<SECTION>__<KEY>`), then
    `section.key=value` overrides, then `flags` ({"section.key": (flag name, value)}).
    Relative paths in the file are relative to its folder."""
    return load_with_origins(path, overrides, env, flags).config
