"""The `swarm-node` command line.

`app` is the Typer application and `main` its console entry point (`swarm.cli.app`). The
commands live by theme: running and preparing a node (`node_commands`), reading a node's
ledger (`ops_commands`), private clusters (`cluster_commands`). Importing this package
registers them all; none of it imports torch, so `--help` and config errors are instant.
"""

# Importing the command modules registers their commands on `app`.
from swarm.cli import cluster_commands, node_commands, ops_commands  # noqa: F401
from swarm.cli.app import app, main

__all__ = ["app", "main"]
