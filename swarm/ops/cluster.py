"""`swarm-node cluster init`: everything a private cluster of N nodes needs, in one folder.

Writes::

    OUT/
      swarm.key            the shared private swarm key (32 random bytes as 64 hex characters, mode 0600)
      allow_list.txt       the members' (and observers') peer IDs, one per line
      cluster.json         members and observers: name, peer ID, listen and dial addresses
      member-0/
        identity.key       this member's Ed25519 identity (libp2p format, mode 0600)
        swarm.key          a copy of the swarm key, so a member folder can be moved alone
        config.toml        a complete node config: run_dir, listen address, bootstrap peers,
                           psk_file and allow_list filled in; every key commented
      member-1/ ...
      observer-0/          with --observers: a node without a model that verifies and
                           records what the members send (node.role = "observer"), with
                           Prometheus metrics on port METRICS_PORT + j of its host

Member i listens on HOST_i:BASE_PORT+i and bootstraps from every other member, so any
subset can start in any order. With one --host all members share it (one machine or
loopback); with N hosts each member gets its own. Observer j listens on its --observer-host
(default: the first member's host) at BASE_PORT+N+j and bootstraps from every member; every
allow-list holds the observers too. Paths in the configs are relative to the
config file (`run_dir = "."`, `psk_file = "swarm.key"`), and cluster.json names each config
relative to itself, so the cluster folder, or one member folder, can be moved or copied to
another machine as it is.

Nothing is ever overwritten: a folder that already holds a cluster, or any member's
identity key, is refused before anything is written.

A member refuses anyone without the swarm key (the connection fails during the handshake)
and anyone whose peer ID is not on the allow-list (the connection is closed at once).

Deliberately not here: starting nodes (each member runs `swarm-node join --config ...`).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from swarm.core.errors import SwarmError

MAX_MEMBERS = 256
MAX_OBSERVERS = 16
METRICS_PORT = 9400  # observer j serves Prometheus metrics on METRICS_PORT + j


@dataclass(frozen=True)
class Member:
    index: int
    peer_id: str
    host: str
    port: int
    role: str = "trainer"  # or "observer"

    @property
    def name(self) -> str:
        return f"{'observer' if self.role == 'observer' else 'member'}-{self.index}"

    @property
    def listen(self) -> str:
        return f"/ip4/{self.host}/tcp/{self.port}"

    @property
    def addr(self) -> str:
        return f"{self.listen}/p2p/{self.peer_id}"


def plan_hosts(nodes: int, hosts: list[str]) -> list[str]:
    """One IPv4 host per member: one given host for all, or exactly one per member."""
    if not 1 <= nodes <= MAX_MEMBERS:
        raise SwarmError(f"--nodes must be between 1 and {MAX_MEMBERS}, not {nodes}")
    hosts = hosts or ["127.0.0.1"]
    for host in hosts:
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise SwarmError(f"--host {host!r} is not an IPv4 address") from None
        if host == "0.0.0.0":
            raise SwarmError(
                "--host 0.0.0.0 cannot be dialed: give each member's reachable address"
            )
    if len(hosts) == 1:
        return hosts * nodes
    if len(hosts) != nodes:
        raise SwarmError(
            f"give one --host for all members or one per member ({nodes}), not {len(hosts)}"
        )
    return hosts


def plan_ports(nodes: int, hosts: list[str], base_port: int) -> list[int]:
    """Member i listens on base_port + i (members on different hosts could share a port, but
    distinct ports keep one plan valid whether the members end up on one machine or many)."""
    if not 1024 <= base_port <= 65535 - nodes + 1:
        raise SwarmError(
            f"--base-port must leave room for {nodes} ports between 1024 and 65535, not {base_port}"
        )
    return [base_port + i for i in range(nodes)]


def member_config(
    member: Member, members: list[Member], swarm_id: str, observers: Sequence[Member] = ()
) -> str:
    """The TOML config of one member, kept in its member folder: the private-cluster keys
    filled in, each commented; its paths relative to the member folder."""
    others = [m.addr for m in members if m.index != member.index]
    allow = [m.peer_id for m in [*members, *observers]]
    return "\n".join(
        [
            f"# {member.name} of a private cluster written by `swarm-node cluster init`.",
            "# Start it with: swarm-node join --config <this file>. Keys not listed take the defaults",
            "# of `swarm-node config --keys` (see node_config/private-cluster.toml for a full annotated preset).",
            "",
            "[node]",
            f"name = {json.dumps(member.name)}  # display name in tables and plots",
            'run_dir = "."  # this folder: identity.key, ledger.sqlite and checkpoints/ live here',
            f"seed = {member.index}  # each member samples its own questions and completions",
            "",
            "[p2p]",
            f"swarm_id = {json.dumps(swarm_id)}  # groups of other swarms are rejected",
            f"listen = {json.dumps(member.listen)}  # fixed, so the other members can bootstrap from it",
            "# every other member: any subset can start first, the rest are dialed as they come up",
            "bootstrap = [" + ", ".join(json.dumps(a) for a in others) + "]",
            'psk_file = "swarm.key"  # the shared swarm key, next to this file: peers without it fail',
            "# the members' peer IDs: connections from any other peer are closed",
            "allow_list = [" + ", ".join(json.dumps(p) for p in allow) + "]",
            "",
        ]
    )


def observer_config(
    observer: Member, members: list[Member], swarm_id: str, allow: list[str]
) -> str:
    """The TOML config of one observer: like a member's, with no model to load, every member
    as bootstrap, and Prometheus metrics on its host."""
    metrics = f"{observer.host}:{METRICS_PORT + observer.index}"
    return "\n".join(
        [
            f"# {observer.name} of a private cluster written by `swarm-node cluster init`: a node",
            "# without a model that verifies and records everything the members send (see",
            "# node_config/observer.toml). Start it with: swarm-node join --config <this file>.",
            "",
            "[node]",
            f"name = {json.dumps(observer.name)}  # display name in tables and plots",
            'role = "observer"  # loads no model: joins, verifies, records, relays',
            'run_dir = "."  # this folder: identity.key, ledger.sqlite, node.log, metrics.jsonl',
            "",
            "[p2p]",
            f"swarm_id = {json.dumps(swarm_id)}  # groups of other swarms are rejected",
            f"listen = {json.dumps(observer.listen)}  # fixed, like the members'",
            "bootstrap = [" + ", ".join(json.dumps(m.addr) for m in members) + "]  # every member",
            'psk_file = "swarm.key"  # the shared swarm key, next to this file',
            "allow_list = [" + ", ".join(json.dumps(p) for p in allow) + "]",
            "",
            "[monitor]",
            f"metrics = {json.dumps(metrics)}  # Prometheus metrics at http://{metrics}/metrics",
            "",
        ]
    )


def plan_observers(observers: int, observer_host: str | None, hosts: list[str]) -> str:
    """The host the observers listen on: --observer-host, else the first member's."""
    if not 0 <= observers <= MAX_OBSERVERS:
        raise SwarmError(f"--observers must be between 0 and {MAX_OBSERVERS}, not {observers}")
    host = observer_host or hosts[0]
    plan_hosts(1, [host])  # the same rules as a member's host
    return host


def init_cluster(
    out: Path,
    nodes: int,
    hosts: list[str],
    base_port: int,
    swarm_id: str,
    observers: int = 0,
    observer_host: str | None = None,
) -> list[Member]:
    """Create the cluster folder; refuse to overwrite an existing one (its keys would be lost).
    Returns the members, then the observers."""
    from swarm.core.identity import IdentityError, create_identity, peer_id_of, save_new_identity
    from swarm.p2p.swarm_key import generate_key, write_key_file

    host_plan = plan_hosts(nodes, hosts)
    obs_host = plan_observers(observers, observer_host, host_plan)
    ports = plan_ports(nodes + observers, host_plan, base_port)
    if not swarm_id or len(swarm_id) > 256:
        raise SwarmError("--swarm-id must be a non-empty name of at most 256 characters")
    out = out.resolve()
    if (out / "swarm.key").exists() or (out / "cluster.json").exists():
        raise SwarmError(
            f"{out} already holds a cluster: choose another --out (its keys would be overwritten)"
        )
    taken = [out / f"member-{i}" / "identity.key" for i in range(nodes)]
    taken += [out / f"observer-{j}" / "identity.key" for j in range(observers)]
    taken = [p for p in taken if p.exists()]
    if taken:
        raise SwarmError(
            f"{taken[0]} already exists: choose another --out (a member's identity is never overwritten)"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        psk = generate_key()
        write_key_file(out / "swarm.key", psk)
        keys = [create_identity() for _ in range(nodes + observers)]
        members = [
            Member(i, peer_id_of(k), host_plan[i], ports[i]) for i, k in enumerate(keys[:nodes])
        ]
        watchers = [
            Member(j, peer_id_of(k), obs_host, ports[nodes + j], role="observer")
            for j, k in enumerate(keys[nodes:])
        ]
        allow = [m.peer_id for m in [*members, *watchers]]
        for node, key in zip([*members, *watchers], keys, strict=True):
            folder = out / node.name
            folder.mkdir(exist_ok=True)
            save_new_identity(key, folder / "identity.key")
            write_key_file(folder / "swarm.key", psk)
            config = (
                observer_config(node, members, swarm_id, allow)
                if node.role == "observer"
                else member_config(node, members, swarm_id, watchers)
            )
            (folder / "config.toml").write_text(config)
        (out / "allow_list.txt").write_text("".join(p + "\n" for p in allow))

        def entry(m: Member) -> dict:
            return {
                "name": m.name,
                "peer_id": m.peer_id,
                "listen": m.listen,
                "addr": m.addr,
                "config": f"{m.name}/config.toml",
            }  # relative to cluster.json

        manifest = {
            "swarm_id": swarm_id,
            "members": [entry(m) for m in members],
            "observers": [
                {**entry(o), "metrics": f"http://{o.host}:{METRICS_PORT + o.index}/metrics"}
                for o in watchers
            ],
        }
        (out / "cluster.json").write_text(json.dumps(manifest, indent=2) + "\n")
    except IdentityError as e:
        raise SwarmError(f"{e}: choose another --out") from None
    except OSError as e:
        raise SwarmError(f"cannot write the cluster folder {out}: {e.strerror or e}") from None
    return members + watchers
