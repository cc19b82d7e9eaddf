"""The swarm's (`INetwork`'s) changes: closing a peer's connections, dialing left to the
transport's own loop, the hole punch's responder dial, and spec PSK protection.
"""

from __future__ import annotations

import logging
from typing import cast

import libp2p.network.swarm as libp2p_swarm
import trio
from libp2p.abc import INetwork
from libp2p.network.config import RetryConfig
from libp2p.peer.id import ID

from swarm.p2p.libp2p import pnet
from swarm.p2p.libp2p.framing import (
    NET_ERRORS,
)

logger = logging.getLogger(__name__)

# How long closing one connection may take once its socket is closed.
CONNECTION_CLOSE_S = 3.0


async def abort_peer_connections(network: INetwork, peer_id: ID) -> None:
    """Close every connection to a peer, sockets first.

    Fixes a close that never finishes: a graceful close writes a GO_AWAY frame behind the
    connection's write lock, so it queues behind any write that is stuck on a full socket.
    Closing the socket (the muxer's `secured_conn`) first fails every task blocked on it;
    the swarm's own close then cleans up.
    """
    conns = list(network.get_connections(peer_id))
    for conn in conns:
        secured = getattr(conn.muxed_conn, "secured_conn", None)
        if secured is None:
            continue
        with trio.move_on_after(1.0):
            try:
                await secured.close()
            except (*NET_ERRORS, trio.ClosedResourceError) as exc:
                logger.debug("closing the socket to %s: %s", peer_id, exc)
    for conn in conns:
        with trio.move_on_after(CONNECTION_CLOSE_S):
            try:
                await conn.close()
            except (*NET_ERRORS, trio.ClosedResourceError) as exc:
                logger.debug("closing the connection to %s: %s", peer_id, exc)


def keep_dialing_in_one_place(network: INetwork) -> None:
    """Leave dialing to the transport's own loop, which has its own backoff and allow-list.

    - The swarm's auto-connector would dial peers from the peerstore every 10-30 s while
      the node has fewer than 100 connections, around the allow-list and our backoff; its
      `start` is replaced so that it never runs.
    - The swarm's own dial retries (3 by default) only stretch each failed dial.
    """
    # The concrete Swarm has both; the INetwork interface names neither.
    network.auto_connector.start = _never_start  # type: ignore[attr-defined]
    network.retry_config = RetryConfig(max_retries=0)  # type: ignore[attr-defined]


def lift_dial_block(network: INetwork, peer_id: ID) -> None:
    """Let the next dial of `peer_id` go out even if its last one failed.

    The swarm refuses, for 60 s, to dial a peer whose last dial failed ("negative cache"),
    which would hide a restarted peer from us for a minute; our own backoff replaces it.
    """
    unblock = getattr(network, "unblock_peer", None)
    if unblock is not None:
        unblock(peer_id)


async def dial_as_server(
    network: INetwork, addr: object, peer_id: ID, source: tuple[str, int]
) -> None:
    """Dial `addr` from `source` (our listen port) and upgrade the connection as its
    responder (the security handshake's server), for a hole punch's simultaneous open.

    Fixes: the swarm's own `dial_addr_as_responder` protects a private network's connection
    and then calls `upgrade_inbound_raw_conn`, which protects it again, so in a private
    swarm the other end reads the PSK stream encrypted twice and both ends refuse the other
    ("another swarm key" / "no swarm key"): every hole punch failed with a PSK. This is the
    same dial with one protection (the one `upgrade_inbound_raw_conn` adds); the connection
    is registered by that upgrade, and refused if the peer is not `peer_id`.
    """
    swarm = cast(libp2p_swarm.Swarm, network)
    transport = swarm.transport_manager.transport_for_dialing(addr)
    dial_with_source = getattr(transport, "dial_with_source", None)
    if not callable(dial_with_source):
        raise libp2p_swarm.SwarmException(f"no transport dials {addr} from a given port")
    raw = await dial_with_source(addr, source)
    try:
        muxed = await swarm.upgrade_inbound_raw_conn(raw, addr)
    except BaseException:
        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
            try:
                await raw.close()
            except (*NET_ERRORS, trio.ClosedResourceError):
                pass
        raise
    if muxed.peer_id != peer_id:
        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
            await muxed.close()
        raise libp2p_swarm.SwarmException(f"expected {peer_id}, reached {muxed.peer_id}")


async def _never_start() -> None:
    """Stands in for AutoConnector.start, so the auto-connector never runs."""


def use_spec_private_networks() -> None:
    """Protect PSK connections the way the libp2p pnet spec says (XSalsa20, 24-byte nonces).

    Fixes: py-libp2p's pnet uses Salsa20 with an 8-byte nonce (and reads that nonce with a
    single unchecked read), so a private swarm-node network could not admit go, js or rust
    libp2p nodes holding the same key. The swarm calls the module-level
    `new_protected_conn` on every raw connection, both ways, when it has a PSK.
    """
    libp2p_swarm.new_protected_conn = pnet.protect  # type: ignore[assignment]  # a patch
