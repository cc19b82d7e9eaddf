"""Writing a config back as TOML that `load_config` reads to the very same config.

`swarm-node config --dump` prints it; `swarm-node demo` writes each node's this way. Paths
come out as the loaded config holds them: absolute after `load_config`, so the file means
the same wherever it is saved.
"""

from __future__ import annotations

from pathlib import Path

from swarm.config.schema import Config
from swarm.core.errors import SwarmError


def dump_toml(data: dict, header: str = "") -> str:
    """`data` (as `Config.to_dict()` gives it) as TOML, after `header` comment lines."""
    import tomli_w

    comments = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comments + ("\n" if comments else "") + tomli_w.dumps(data)


def dump_config(config: Config, header: str = "") -> str:
    """A whole config as TOML, every key written out."""
    return dump_toml(config.to_dict(), header)


def write_config(path: Path, data: dict, header: str = "") -> None:
    """Write `data` as a TOML config file (one line on failure)."""
    try:
        path.write_text(dump_toml(data, header))
    except OSError as e:
        raise SwarmError(f"cannot write {path}: {e.strerror or e}") from None
