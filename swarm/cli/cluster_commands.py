"""`swarm-node cluster ...`: private clusters."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from swarm.cli.app import app

cluster_app = typer.Typer(
    help="Private clusters: shared swarm key, member identities, allow-list and configs.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(cluster_app, name="cluster")


@cluster_app.command("init")
def cluster_init(
    nodes: Annotated[int, typer.Option(help="Number of members (1 to 256).")] = 3,
    out: Annotated[
        Path,
        typer.Option(
            help="Folder to create (refused if it already holds a cluster or any member's "
            "identity)."
        ),
    ] = Path("cluster"),
    host: Annotated[
        list[str] | None,
        typer.Option(
            help="IPv4 address the members listen on and are dialed at: once for all members, or "
            "once per member (default 127.0.0.1)."
        ),
    ] = None,
    base_port: Annotated[
        int, typer.Option(help="Member i listens on TCP port base-port + i.")
    ] = 4100,
    swarm_id: Annotated[
        str, typer.Option(help="Swarm id written into every member's config (p2p.swarm_id).")
    ] = "private-cluster",
    observers: Annotated[
        int,
        typer.Option(
            help="Also write this many observers (0 to 16): nodes without a model that verify "
            "and record what the members send, with Prometheus metrics on port 9400 + j."
        ),
    ] = 0,
    observer_host: Annotated[
        str | None,
        typer.Option(
            help="IPv4 address the observers listen on and are dialed at (default: the first "
            "member's host)."
        ),
    ] = None,
) -> None:
    """Write a private cluster: a shared swarm key (PSK), one identity per member, the allow-list
    of their peer IDs, and one config per member with fixed listen addresses and every other
    member as bootstrap.

    Start member i with 'swarm-node join --config OUT/member-i/config.toml' (an observer:
    OUT/observer-j/config.toml). Paths in the configs are relative to them, so the folder (or
    one member's folder) can be moved or copied to another machine. Members refuse peers
    without the key or not on the allow-list (which lists the observers too).
    """
    from swarm.ops.cluster import init_cluster

    members = init_cluster(
        out, nodes, list(host or []), base_port, swarm_id, observers, observer_host
    )
    watching = f" and {observers} observer{'s' * (observers != 1)}" if observers else ""
    typer.echo(
        f"wrote a private cluster of {nodes} members{watching} to {out.resolve()} (swarm key: "
        f"{out.resolve() / 'swarm.key'})"
    )
    for m in members:
        typer.echo(
            f"  {m.name}  {m.addr}\n      swarm-node join --config {out / m.name / 'config.toml'}"
        )
