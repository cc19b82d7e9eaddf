"""Checking the multiaddrs of a config before anything starts, and whether a port is free.

The transport only listens on and dials TCP over IP (`/ip4/<ip>/tcp/<port>`, or `/ip6/...`);
a bootstrap address also ends in `/p2p/<peer id>`. These functions say, in one line, what is
wrong with an address a user typed, without importing libp2p (only the small `multiaddr`
package), so `swarm-node join` and `swarm-node config` can refuse a bad address at once.
`listen_problem` tries to bind the port, which is how an address already in use, or one
that is not this machine's, is told apart before a model is loaded.
"""

from __future__ import annotations

import errno
import re
import socket
from dataclasses import dataclass

from swarm.core.errors import ConfigError

# An Ed25519 libp2p peer ID: "12D3KooW" + 44 base58 characters (what `swarm-node id` prints).
PEER_ID_PATTERN = re.compile(r"^12D3KooW[1-9A-HJ-NP-Za-km-z]{44}$")


@dataclass(frozen=True)
class TcpAddress:
    """The IP, port and (for a dial address) peer ID of a TCP multiaddr."""

    host: str
    port: int
    family: socket.AddressFamily
    peer_id: str = ""


def _parse(addr: object, what: str):
    import multiaddr

    if not isinstance(addr, str):
        raise ConfigError(f"{what} must be a multiaddr string, got {addr!r}")
    try:
        parsed = multiaddr.Multiaddr(addr)
    except (ValueError, TypeError) as e:
        reason = str(e).split(" (string:", 1)[0].removeprefix(f"Invalid MultiAddr {addr!r}: ")
        raise ConfigError(f"{what} {addr!r} is not a multiaddr: {reason}") from None
    return parsed, [p.name for p in parsed.protocols()]


def parse_listen(addr: object) -> TcpAddress:
    """A listen address `/ip4/<ip>/tcp/<port>` (or /ip6/); raises `ConfigError`."""
    parsed, names = _parse(addr, "listen address")
    if names != ["ip4", "tcp"] and names != ["ip6", "tcp"]:
        raise ConfigError(
            f"listen address {addr!r} must be /ip4/<ip>/tcp/<port> or /ip6/<ip>/tcp/<port>"
        )
    family = socket.AF_INET if names[0] == "ip4" else socket.AF_INET6
    return TcpAddress(
        parsed.value_for_protocol(names[0]), int(parsed.value_for_protocol("tcp")), family
    )


def parse_dial(addr: object) -> TcpAddress:
    """A bootstrap address `/ip4/<ip>/tcp/<port>/p2p/<peer id>` (or /ip6/); raises `ConfigError`."""
    example = "/ip4/<ip>/tcp/<port>/p2p/12D3KooW..."
    parsed, names = _parse(addr, "bootstrap address")
    if len(names) != 3 or names[0] not in ("ip4", "ip6") or names[1:] != ["tcp", "p2p"]:
        raise ConfigError(f"bootstrap address {addr!r} must be {example} (or /ip6/...)")
    peer_id = parsed.value_for_protocol("p2p")
    check_peer_id(peer_id, f"bootstrap address {addr!r}: its peer ID")
    family = socket.AF_INET if names[0] == "ip4" else socket.AF_INET6
    return TcpAddress(
        parsed.value_for_protocol(names[0]), int(parsed.value_for_protocol("tcp")), family, peer_id
    )


def parse_relay(addr: object) -> TcpAddress:
    """A relay address `/ip4/<ip>/tcp/<port>/p2p/<peer id>` (or /ip6/, or /dns4/ or /dns6/
    with a host name, which the node resolves each time it connects); raises `ConfigError`."""
    example = "/ip4/<ip>/tcp/<port>/p2p/12D3KooW... (or /ip6/<ip>, /dns4/<name>, /dns6/<name>)"
    parsed, names = _parse(addr, "relay address")
    if (
        len(names) != 3
        or names[0] not in ("ip4", "ip6", "dns4", "dns6")
        or names[1:] != ["tcp", "p2p"]
    ):
        raise ConfigError(f"relay address {addr!r} must be {example}")
    peer_id = parsed.value_for_protocol("p2p")
    check_peer_id(peer_id, f"relay address {addr!r}: its peer ID")
    family = socket.AF_INET6 if names[0] in ("ip6", "dns6") else socket.AF_INET
    return TcpAddress(
        parsed.value_for_protocol(names[0]), int(parsed.value_for_protocol("tcp")), family, peer_id
    )


def check_peer_id(peer_id: object, what: str) -> str:
    """`peer_id` if it is an Ed25519 peer ID string (12D3KooW + 44 base58 characters)."""
    if not isinstance(peer_id, str) or not PEER_ID_PATTERN.match(peer_id):
        raise ConfigError(
            f"{what} {peer_id!r} is not a peer ID (12D3KooW followed by 44 base58 characters)"
        )
    return peer_id


def listen_problem(address: TcpAddress) -> str | None:
    """Why this node could not listen on `address` (bound here, then released), or None.

    Port 0 (any free port) only checks that the IP is this machine's."""
    sock = socket.socket(address.family, socket.SOCK_STREAM)
    try:
        # As the transport's listener does: without it a port in TIME_WAIT looks taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address.host, address.port))
    except OSError as e:
        return describe_bind_error(e, address)
    finally:
        sock.close()
    return None


def describe_bind_error(error: OSError, address: TcpAddress) -> str:
    """One line on why binding `address` failed, with what to do about it."""
    where = f"{address.host}:{address.port}"
    if error.errno == errno.EADDRINUSE:
        return (
            f"port {address.port} on {address.host} is already in use (another node, or another "
            "program): stop it, or choose another port (tcp/0 picks a free one)"
        )
    if error.errno == errno.EADDRNOTAVAIL:
        return (
            f"{address.host} is not an address of this machine: "
            "listen on one of its own (or 0.0.0.0)"
        )
    if error.errno == errno.EACCES:
        return (
            f"no permission to listen on {where} (ports below 1024 need privileges): "
            "choose a port >= 1024"
        )
    return f"cannot listen on {where}: {error.strerror or error}"
