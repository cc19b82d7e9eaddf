"""Checks of the NAT keys (`p2p.listen`, `p2p.relays`, `p2p.relay_service`) against the rest
of a config: what cannot work is refused in one line with the fix (`check_relays`, run with
the other cross-field rules; `check_own_relay`, once the identity is read); what works
poorly is said in one WARNING line (`relay_warnings`, run by `config` and `join`)."""

from __future__ import annotations

import ipaddress
import logging

from swarm.config.schema import Config
from swarm.core.errors import ConfigError

logger = logging.getLogger(__name__)

NO_LISTEN = ""  # p2p.listen: listen on nothing (reached only through p2p.relays)


def relay_peer_id(addr: object) -> str:
    """The peer ID a relay address ends in ('' if it names none)."""
    if not isinstance(addr, str) or "/p2p/" not in addr:
        return ""
    return addr.rsplit("/p2p/", 1)[1].strip("/")


def check_relays(config: Config, origin) -> None:
    """Relay settings that cannot work, refused: relays with the gossip exchange (it never
    dials a relay address), a relay off the allow-list (its connection would be closed), a
    relay service that listens on nothing."""
    p2p = config.p2p
    if p2p.relays and p2p.exchange == "gossip":
        raise ConfigError(
            f"{origin('p2p', 'relays', 'p2p.exchange')}: p2p.relays is used only by the pull "
            'exchange: with p2p.exchange = "gossip" peers dial direct addresses only and never '
            'reach this node through a relay; remove p2p.relays, or use p2p.exchange = "pull" '
            "on every node of the swarm"
        )
    if p2p.relay_service and p2p.listen == NO_LISTEN:
        raise ConfigError(
            f"{origin('p2p', 'relay_service', 'p2p.listen')}: p2p.relay_service = true needs "
            "an address peers can dial: set p2p.listen (e.g. /ip4/0.0.0.0/tcp/4001)"
        )
    if p2p.allow_list:
        for i, addr in enumerate(p2p.relays):
            peer = relay_peer_id(addr)
            if peer and peer not in p2p.allow_list:
                raise ConfigError(
                    f"{origin('p2p', 'relays', 'p2p.allow_list')}: p2p.relays[{i}] is peer "
                    f"{peer}, which is not on p2p.allow_list: its connection would be closed "
                    "and no reservation held; add it to p2p.allow_list (on every member)"
                )


def check_own_relay(config: Config, peer_id: str | None, where) -> None:
    """Refuse this node's own peer ID among its relays (it cannot relay for itself)."""
    for i, addr in enumerate(config.p2p.relays):
        if peer_id is not None and relay_peer_id(addr) == peer_id:
            raise ConfigError(
                f"{where('p2p.relays', 'node.run_dir')}: p2p.relays[{i}] is this node itself "
                f"(peer {peer_id}): a node cannot reach itself through its own relay; name "
                "another node that runs with p2p.relay_service = true"
            )


def relay_warnings(config: Config) -> list[str]:
    """What works poorly with these settings, one line each with the fix."""
    p2p = config.p2p
    lines = []
    if p2p.relay_service and _loopback(p2p.listen):
        lines.append(
            f"p2p.relay_service = true, but p2p.listen = {p2p.listen!r} is a loopback address: "
            "only peers on this machine can use this relay; listen on /ip4/0.0.0.0/tcp/<port> "
            "(and open that port) to relay for others"
        )
    if p2p.relay_service and p2p.exchange == "gossip":
        lines.append(
            'p2p.relay_service = true with p2p.exchange = "gossip": gossip nodes never dial '
            "through a relay, so this relay serves no one in this swarm"
        )
    if p2p.listen == NO_LISTEN and not p2p.relays:
        lines.append(
            "p2p.listen = '' and no p2p.relays: this node listens on nothing, so no peer can "
            "reach it; it still pulls, but its groups reach only peers it connects to itself; "
            "name a relay in p2p.relays"
        )
    return lines


def warn_relays(config: Config) -> None:
    for line in relay_warnings(config):
        logger.warning("%s", line)


def _loopback(listen: str) -> bool:
    parts = listen.split("/")
    if len(parts) < 3 or parts[1] not in ("ip4", "ip6"):
        return False
    try:
        return ipaddress.ip_address(parts[2]).is_loopback
    except ValueError:
        return False
