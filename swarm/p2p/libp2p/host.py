"""The libp2p host and who may reach it: TCP + Noise + Yamux, an optional PSK and allow-list.

Constructor arguments arrive as plain strings and are parsed here into libp2p values;
each parse error is a `TransportError` that names the bad value. `build_host` makes the
host with Noise as its only security transport (the library default also offers
`/plaintext/2.0.0`, with which a peer can claim any peer ID) and Yamux as its only muxer.
`AccessPolicy` answers "may this peer talk to us" everywhere a peer's bytes arrive, and
`AllowListNotifee` closes connections from peers that may not.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

import multiaddr
from libp2p import new_host
from libp2p.abc import IHost, INetConn, INetStream, INetwork, INotifee
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.x25519 import create_new_key_pair as create_new_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.exceptions import BaseLibp2pError
from libp2p.network.config import ConnectionConfig
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import InvalidAddrError, info_from_p2p_addr
from libp2p.peer.peerinfo import PeerInfo as Libp2pPeerInfo
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID

from swarm.core.errors import TransportError
from swarm.core.identity import create_identity, load_or_create_identity
from swarm.p2p.libp2p.framing import NET_ERRORS
from swarm.p2p.libp2p.patches import (
    SwarmYamux,
    keep_dialing_in_one_place,
    quiet_protocol_not_supported,
    use_bounded_yamux,
    use_spec_private_networks,
)
from swarm.p2p.libp2p.peer_costs import Ban, Cost, PeerCosts, Verdict

logger = logging.getLogger(__name__)

DEFAULT_LISTEN_ADDR = "/ip4/127.0.0.1/tcp/0"
DEFAULT_DIAL_TIMEOUT = 10.0

_PSK_RE = re.compile(r"^[0-9a-fA-F]{64}$")
_PEER_STR_CACHE = 4096


# ------------------------------------------------------------------ argument parsing


def parse_listen_addr(addr: str) -> multiaddr.Multiaddr | None:
    """A TCP listen address, "/ip4/<ip>/tcp/<port>" or its ip6 form; "": listen on nothing."""
    if addr == "":
        return None
    try:
        parsed = multiaddr.Multiaddr(addr)
    except (ValueError, TypeError) as exc:
        raise TransportError(f"invalid listen address {addr!r}: {exc}") from exc
    names = [p.name for p in parsed.protocols()]
    if len(names) != 2 or names[0] not in ("ip4", "ip6") or names[1] != "tcp":
        raise TransportError(
            f"listen address {addr!r} must be /ip4/<ip>/tcp/<port> or /ip6/<ip>/tcp/<port>"
        )
    return parsed


def parse_announce(addrs: Iterable[str]) -> list[multiaddr.Multiaddr]:
    """Addresses to tell peers instead of the listened ones: each a TCP address."""
    parsed = [parse_listen_addr(a) for a in addrs if a != ""]
    return [a for a in parsed if a is not None]


def parse_bootstrap(addrs: Iterable[str]) -> list[Libp2pPeerInfo]:
    """Bootstrap peers from full multiaddrs (each with /p2p/<peer id>), merged per peer."""
    return parse_peers(addrs, "bootstrap address", "needs a trailing /p2p/<peer id>")


def parse_peers(addrs: Iterable[str], what: str, needs: str) -> list[Libp2pPeerInfo]:
    """Peers from full multiaddrs, merged per peer; `TransportError` naming `what` (and what
    it `needs`) for one that does not parse."""
    infos: dict[ID, Libp2pPeerInfo] = {}
    for addr in addrs:
        try:
            info = info_from_p2p_addr(multiaddr.Multiaddr(addr))
        except (InvalidAddrError, ValueError, TypeError) as exc:
            raise TransportError(f"invalid {what} {addr!r} ({needs}): {exc}") from exc
        if info.peer_id in infos:
            infos[info.peer_id].addrs.extend(info.addrs)
        else:
            infos[info.peer_id] = info
    return list(infos.values())


def parse_psk(psk: str | None) -> str | None:
    """A private-network key: 64 hex characters, lower-cased; None for an open network."""
    if psk is None:
        return None
    if not _PSK_RE.match(psk):
        raise TransportError("a private-network key (psk) must be exactly 64 hex characters")
    return psk.lower()


def parse_allow_list(allow_list: Iterable[str] | None) -> frozenset[str] | None:
    """Canonical base58 peer IDs; None means every peer is allowed."""
    if allow_list is None:
        return None
    parsed = set()
    for peer in allow_list:
        try:
            parsed.add(ID.from_base58(peer).to_base58())
        except ValueError as exc:
            raise TransportError(f"invalid peer ID in allow-list: {peer!r}") from exc
    return frozenset(parsed)


def resolve_key_pair(
    key_pair: KeyPair | None, identity_path: str | os.PathLike[str] | None
) -> KeyPair:
    """The node identity: a key pair, a key file (created on first use), or a fresh one."""
    if key_pair is not None and identity_path is not None:
        raise TransportError("give either key_pair or identity_path, not both")
    if key_pair is not None:
        return key_pair
    if identity_path is not None:
        return load_or_create_identity(identity_path)
    # An ephemeral identity: fine for tests and benchmarks, useless for a node that restarts.
    return create_identity()


# ------------------------------------------------------------------ who may talk to us


class AccessPolicy:
    """Who may talk to us: the allow-list and the cost bans (`peer_costs`), checked wherever
    a peer's bytes arrive; `charge` bills a peer for what it makes us handle. Also a cache
    of peer IDs' base58 forms (used per message).

    Used on the network thread only.
    """

    def __init__(
        self, my_id: ID, allow_list: frozenset[str] | None, costs: PeerCosts | None = None
    ) -> None:
        self.my_id = my_id
        self.my_peer_id = my_id.to_base58()
        self.allow_list = allow_list
        self.costs = costs
        self.on_ban: Callable[[ID, Ban], None] | None = None  # set by gossip.Gossip
        self._peer_strs: dict[bytes, str] = {}

    def charge(self, peer_id: ID | str, cost: Cost, n: float = 1.0) -> Verdict:
        """Bill `peer_id` for `n` of `cost`; a peer that crosses its ban level is reported
        to `on_ban` (which disconnects it) once."""
        if self.costs is None or not n:
            return Verdict.OK
        peer = peer_id if isinstance(peer_id, str) else self.peer_str(peer_id.to_bytes())
        if peer == self.my_peer_id:
            return Verdict.OK
        verdict = self.costs.charge(peer, cost, n)
        if verdict is Verdict.BANNED and self.on_ban is not None:
            ban = self.costs.ban(peer)
            if ban is not None:
                self.on_ban(ID.from_base58(peer) if isinstance(peer_id, str) else peer_id, ban)
        return verdict

    def graylisted(self, peer_id: ID) -> bool:
        """Whether `peer_id` is past its budget: its RPCs are dropped before parsing."""
        return self.costs is not None and self.costs.graylisted(self.peer_str(peer_id.to_bytes()))

    def banned_str(self, peer_id: str) -> bool:
        return self.costs is not None and self.costs.banned(peer_id)

    def peer_str(self, peer_id_bytes: bytes) -> str:
        """base58 of a peer ID's bytes; base58 is pure Python, so a small cache keeps it cheap."""
        cached = self._peer_strs.get(peer_id_bytes)
        if cached is None:
            if len(self._peer_strs) > _PEER_STR_CACHE:
                self._peer_strs.clear()
            cached = self._peer_strs[peer_id_bytes] = ID(peer_id_bytes).to_base58()
        return cached

    def allows(self, peer_id: ID) -> bool:
        if self.costs is not None and self.costs.banned(self.peer_str(peer_id.to_bytes())):
            return False
        return (
            self.allow_list is None
            or peer_id == self.my_id
            or self.peer_str(peer_id.to_bytes()) in self.allow_list
        )

    def allows_str(self, peer_id: str) -> bool:
        if self.banned_str(peer_id):
            return False
        return self.allow_list is None or peer_id == self.my_peer_id or peer_id in self.allow_list


class AllowListNotifee(INotifee):
    """Closes every connection whose (Noise-authenticated) peer ID is not allowed: off the
    allow-list, or banned for its costs; `on_connected` bills each connection that stays.

    The library's connection gate filters by IP only; this is the peer-ID gate. Messages
    and streams from unlisted peers are also refused where they arrive, in case one slips
    in before its connection is closed.
    """

    def __init__(
        self,
        is_allowed: Callable[[ID], bool],
        on_refused: Callable[[ID], None],
        on_connected: Callable[[ID], object] = lambda peer_id: None,
    ) -> None:
        self._is_allowed = is_allowed
        self._on_refused = on_refused
        self._on_connected = on_connected

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        peer_id = conn.muxed_conn.peer_id
        if self._is_allowed(peer_id):
            self._on_connected(peer_id)
            return
        self._on_refused(peer_id)
        try:
            await conn.close()
        except NET_ERRORS as exc:
            logger.debug("closing refused connection from %s failed: %s", peer_id, exc)

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        return None

    async def opened_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def closed_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def listen(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        return None

    async def listen_close(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        return None


# ------------------------------------------------------------------ the host


def build_host(
    key_pair: KeyPair,
    listen_addr: multiaddr.Multiaddr | None,
    psk: str | None,
    dial_timeout: float,
    on_flow_violation: Callable[[ID], None],
) -> IHost:
    """A host over TCP with Noise only, Yamux only, no mDNS; dialing is left to the transport.

    `on_flow_violation(peer)` is called when a peer writes past a stream's receive window.
    """
    if psk is not None:
        use_spec_private_networks()
    noise = NoiseTransport(key_pair, noise_privkey=create_new_x25519_key_pair().private_key)
    host = new_host(
        key_pair=key_pair,
        # Picks the TCP transport; the host listens only on what `host.run` is given.
        listen_addrs=[listen_addr or multiaddr.Multiaddr(DEFAULT_LISTEN_ADDR)],
        sec_opt={NOISE_PROTOCOL_ID: noise},  # Noise only: no plaintext, no impersonation
        muxer_opt=_yamux_only(),
        psk=psk,
        enable_mDNS=False,
        connection_config=ConnectionConfig(dial_timeout=dial_timeout),
        # Identify's "observed address" of an outbound connection is an ephemeral port;
        # advertising it would hand peers addresses nobody listens on.
        disable_identify_address_discovery=True,
    )
    keep_dialing_in_one_place(host.get_network())
    use_bounded_yamux(host.get_id(), on_flow_violation)
    quiet_protocol_not_supported()
    return host


def _yamux_only() -> dict[TProtocol, Any]:
    # Mplex measured 20-40 MB/s against Yamux's 150-315 MB/s; offering it only invites a
    # slow negotiation result with peers that prefer it.
    return {TProtocol(YAMUX_PROTOCOL_ID): SwarmYamux}


# ------------------------------------------------------------------ connected peers


def connected_peers(host: IHost) -> list[ID]:
    """Peers with at least one open connection."""
    network = host.get_network()
    return [
        peer_id
        for peer_id, conns in list(network.connections.items())
        if any(not conn.is_closed for conn in conns)
    ]


def is_connected(host: IHost, peer_id: ID) -> bool:
    conns = host.get_network().connections.get(peer_id, ())
    return any(not conn.is_closed for conn in conns)


def peer_addrs(host: IHost, peer_id: ID) -> list[multiaddr.Multiaddr]:
    """The peerstore's addresses of a peer; none if the peerstore does not know it."""
    try:
        return list(host.get_peerstore().addrs(peer_id))
    except (BaseLibp2pError, KeyError):
        return []


def is_dialable_tcp(addr: multiaddr.Multiaddr) -> bool:
    names = [p.name for p in addr.protocols()]
    return (
        len(names) >= 2
        and names[0] in ("ip4", "ip6")
        and names[1] == "tcp"
        and "p2p-circuit" not in names
    )
