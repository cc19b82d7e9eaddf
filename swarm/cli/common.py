"""What several commands share: their common options, loading the config, finding a ledger.

Config is parsed and checked before anything heavy is imported, so `--help` and config
errors are instant; torch, transformers and libp2p are imported inside the commands that
need them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from swarm.core.errors import SwarmError

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="TOML config file (see node_config/ for annotated presets; relative paths in it are "
        "relative to its folder). Defaults apply without one.",
    ),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        help="Override one config key, e.g. --set training.lr=1e-5 (repeatable). Wins over the "
        "file and over SWARM__<SECTION>__<KEY> environment variables.",
    ),
]
RunDirOption = Annotated[
    str | None, typer.Option(help="Node folder whose ledger to read (overrides node.run_dir).")
]
LedgerOption = Annotated[
    str | None,
    typer.Option(
        help="Ledger file or SQLAlchemy URL to read instead of the node's (e.g. a copy from "
        "another machine)."
    ),
]
SinceOption = Annotated[
    str | None,
    typer.Option(
        help="Only what happened since then: a duration back from now (30m, 2h, 1d), an ISO "
        "date/time or unix seconds."
    ),
]
UntilOption = Annotated[
    str | None, typer.Option(help="Only what happened until then (same forms as --since).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def load(
    config: Path | None, sets: list[str] | None, flags: dict[str, tuple[str, Any]] | None = None
):
    """The config from file + env + --set, then the dedicated flags (which win over all).

    `flags` maps a config key to (flag name, value); a value of None was not given. Errors
    name whichever of them set the offending value."""
    return load_traced(config, sets, flags).config


def load_traced(
    config: Path | None, sets: list[str] | None, flags: dict[str, tuple[str, Any]] | None = None
):
    """`load`, keeping where each key came from (`swarm.config.load.LoadedConfig`)."""
    from swarm.config.load import load_with_origins

    given = {
        key: (flag, value) for key, (flag, value) in (flags or {}).items() if value is not None
    }
    return load_with_origins(config, list(sets or []), flags=given)


def ledger_url(cfg, ledger: str | None) -> str:
    """The ledger to read: `--ledger` (a file or URL), else the node's."""
    if ledger is None:
        path = cfg.run_dir / "ledger.sqlite"
        if not cfg.ledger.url and not path.exists():
            raise SwarmError(f"no ledger at {path}: give --run-dir or --ledger")
        return cfg.ledger_url
    if "://" in ledger:
        return ledger
    if not Path(ledger).exists():
        raise SwarmError(f"ledger file {ledger} does not exist")
    return f"sqlite:///{Path(ledger).resolve()}"


def checked_ledger_url(cfg, ledger: str | None) -> str:
    """The ledger to read, refusing (one line) a file that is not a swarm-node ledger."""
    from sqlalchemy import inspect

    from swarm.core.errors import LedgerError
    from swarm.ledger import Ledger, get_meta

    url = ledger_url(cfg, ledger)
    name = url[len("sqlite:///") :] if url.startswith("sqlite:///") else url
    if Path(name).is_dir():
        raise SwarmError(f"{name} is a folder, not a ledger file")
    opened = Ledger(url, create=False)
    try:
        with opened.reader() as session:
            tables = inspect(session.get_bind()).get_table_names()
            if "meta" not in tables or get_meta(session, "schema_version") is None:
                raise SwarmError(f"{name} is not a swarm-node ledger (it has no schema version)")
    except LedgerError as e:
        reason = str(e).rsplit(": ", 1)[-1]
        raise SwarmError(f"{name} is not a readable swarm-node ledger ({reason})") from None
    finally:
        opened.close()
    return url
