"""The `swarm-node` command line.

Config is parsed and checked before anything heavy is imported, so `--help` and config
errors are instant; torch, transformers and libp2p are imported inside the commands that
need them. Every `SwarmError` is printed as one line (`error: ...`) with exit code 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from swarm.errors import SwarmError

app = typer.Typer(
    name="swarm-node",
    help="A node of a decentralized RL swarm: trains its own policy with GRPO on verifiable tasks, "
    "shares signed rollouts with peers and keeps a ledger of every contribution.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # joins docstring lines into paragraphs in --help
)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="TOML config file (see node_config/ for annotated presets). Defaults apply without one."),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override one config key, e.g. --set training.lr=1e-5 (repeatable). Wins over the file and SWARM__<SECTION>__<KEY> env vars."),
]


def _load(config: Path | None, sets: list[str] | None, **flags):
    """Config from file + env + --set, then the dedicated flags (which win over all)."""
    from swarm.config import load_config

    overrides = list(sets or [])
    for key, value in flags.items():
        if value is not None:
            overrides.append(f"{key}={_toml_literal(value)}")
    return load_config(config, overrides)


def _toml_literal(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml_literal(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


@app.command()
def join(
    config: ConfigOption = None,
    sets: SetOption = None,
    rounds: Annotated[int | None, typer.Option(help="Stop once this many rounds exist in total (overrides node.rounds; 0 runs until stopped).")] = None,
    run_dir: Annotated[str | None, typer.Option(help="Folder for identity, ledger and checkpoints (overrides node.run_dir).")] = None,
    model: Annotated[str | None, typer.Option(help="Hugging Face model name or path, or 'swarm-tiny' (overrides policy.model).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of this node (overrides node.seed).")] = None,
    bootstrap: Annotated[list[str] | None, typer.Option(help="Multiaddr /ip4/.../tcp/.../p2p/12D3KooW... of a peer to join through (repeatable; replaces p2p.bootstrap).")] = None,
    listen: Annotated[str | None, typer.Option(help="Multiaddr to listen on, e.g. /ip4/0.0.0.0/tcp/4001 (overrides p2p.listen).")] = None,
    display: Annotated[str, typer.Option(help="Progress display: auto (live on a terminal, lines otherwise), live, lines or none.")] = "auto",
) -> None:
    """Run a node: generate, score, share and train, round after round.

    With no bootstrap peers the node trains alone (solo mode). It resumes from the latest
    checkpoint in its run folder. Ctrl-C stops it after the current round, with the ledger
    and a checkpoint written; a second Ctrl-C aborts at once.
    """
    cfg = _load(
        config, sets,
        **{"node.rounds": rounds, "node.run_dir": run_dir, "policy.model": model, "node.seed": seed, "p2p.listen": listen,
           "p2p.bootstrap": bootstrap or None},
    )
    if display not in ("auto", "live", "lines", "none"):
        raise SwarmError(f"--display must be auto, live, lines or none, not {display!r}")
    from swarm.display import make_reporter
    from swarm.node import Node

    reporter = make_reporter(display)
    node = Node(cfg, reporter=reporter)
    previous = signal.getsignal(signal.SIGINT)

    def on_interrupt(signum, frame):
        if node._stop.is_set():  # second Ctrl-C: give up on a clean stop
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        reporter.message("stopping after the current round (Ctrl-C again to abort)...")
        node.request_stop()

    signal.signal(signal.SIGINT, on_interrupt)
    signal.signal(signal.SIGTERM, on_interrupt)
    try:
        state = node.run()
    finally:
        node.close()
        signal.signal(signal.SIGINT, previous)
    typer.echo(f"stopped at round {state.round}, policy v{state.policy_version}; ledger and checkpoint in {cfg.run_dir}")


@app.command()
def init(
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: Annotated[str | None, typer.Option(help="Node folder (overrides node.run_dir); the identity is its identity.key.")] = None,
) -> None:
    """Create this node's persistent identity (Ed25519, libp2p format, mode 0600) and show its peer ID.

    `join` with the same run folder reuses it. Running init again keeps the existing identity.
    """
    cfg = _load(config, sets, **{"node.run_dir": run_dir})
    from swarm.p2p.identity import (
        create_identity,
        identity_exists,
        load_identity,
        peer_id_of,
        save_identity,
    )

    path = cfg.run_dir / "identity.key"
    if identity_exists(path):
        key, verb = load_identity(path), "existing"
    else:
        key, verb = create_identity(), "new"
        save_identity(key, path)
    peer_id = peer_id_of(key)
    typer.echo(f"{verb} identity {path}")
    typer.echo(f"peer ID: {peer_id}")
    listen = cfg.p2p.listen
    if listen.endswith("/tcp/0"):
        typer.echo(f"listen address: {listen} (a free port is chosen by join; it writes the full address to {cfg.run_dir / 'node.json'})")
    else:
        typer.echo(f"listen address: {listen}/p2p/{peer_id}")


@app.command()
def demo(
    nodes: Annotated[int, typer.Option(min=1, max=32, help="How many node processes to start on 127.0.0.1.")] = 4,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds each node runs before it stops by itself.")] = 30,
    out: Annotated[Path | None, typer.Option(help="Run folder (default: runs/demo-<time>); one sub-folder per node.")] = None,
    config: ConfigOption = None,
    sets: SetOption = None,
    timeout: Annotated[float | None, typer.Option(help="Stop every node after this many seconds (default: generous, from nodes and rounds).")] = None,
) -> None:
    """Run a local swarm: N node processes on loopback sharing signed rollouts, with a live table.

    Each node has its own identity, ledger and checkpoints under the run folder. At the end
    the demo writes summary.json and reward.png (reward per node over rounds) there.
    """
    import time as _time

    from swarm.demo import run_demo

    folder = out or Path("runs") / f"demo-{_time.strftime('%Y%m%d-%H%M%S')}"
    summary = run_demo(nodes, rounds, folder, config, list(sets or []), timeout)
    if any(n["exit_code"] not in (0, None) for n in summary["per_node"]):
        raise typer.Exit(1)


@app.command()
def status(
    config: ConfigOption = None,
    sets: SetOption = None,
    run_dir: Annotated[str | None, typer.Option(help="Node folder to inspect (overrides node.run_dir).")] = None,
    ledger: Annotated[str | None, typer.Option(help="Ledger file or SQLAlchemy URL to read instead of the node's.")] = None,
    last: Annotated[int, typer.Option(min=1, help="How many recent rounds to show.")] = 10,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Show a node's latest rounds, evaluations and update counts from its ledger."""
    cfg = _load(config, sets, **{"node.run_dir": run_dir})
    from swarm.status import show_status

    show_status(_ledger_url(cfg, ledger), last=last, as_json=json_out)


@app.command("config")
def config_cmd(
    config: ConfigOption = None,
    sets: SetOption = None,
    keys: Annotated[bool, typer.Option("--keys", help="List every config key with its default and meaning.")] = False,
) -> None:
    """Check a config and print the effective values (or every key's documentation with --keys)."""
    from swarm.config import describe_config

    if keys:
        for key, default, help_text in describe_config():
            typer.echo(f"{key} = {default}\n    {help_text}")
        return
    cfg = _load(config, sets)
    import json

    typer.echo(json.dumps(cfg.to_dict(), indent=2))


def _ledger_url(cfg, ledger: str | None) -> str:
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


def main() -> None:
    """Console entry point: run the app, printing `SwarmError`s as one line."""
    try:
        app(standalone_mode=False)
    except SwarmError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except (typer.Abort, typer.Exit) as e:
        sys.exit(getattr(e, "exit_code", 1))
    except Exception as e:  # click usage errors arrive here in non-standalone mode
        import click

        if isinstance(e, click.ClickException):
            e.show()
            sys.exit(e.exit_code)
        raise


if __name__ == "__main__":
    main()
