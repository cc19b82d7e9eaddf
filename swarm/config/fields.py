"""A config key's declaration: its default, its documentation and its constraints.

Every section dataclass declares its keys with `opt`; `swarm-node config keys` shows the
help, and `swarm.config.build` enforces the choices and bounds kept in the field's metadata.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any


def opt(
    default: Any,
    help: str,
    *,
    choices: tuple = (),
    min: float | None = None,
    max: float | None = None,
    path: bool = False,
):
    """A config field with its documentation and constraints (shown by `swarm-node config`).

    `path`: the value is a file or folder; a relative one in a config file is relative to
    that file's folder (see `load_config`)."""
    meta = {"help": help, "choices": choices, "min": min, "max": max, "path": path}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)
