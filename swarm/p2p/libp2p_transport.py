"""`Libp2pTransport`: the `Transport` contract over py-libp2p 0.8.1 (TCP + Noise + Yamux + GossipSub).

py-libp2p is trio-only, and the node is a plain synchronous program, so the libp2p host runs
in a daemon thread of its own, inside its own `trio.run`. The node thread calls in through
`trio.from_thread.run(..., trio_token=...)`, and messages come back out through the
thread-safe `BoundedInbox`. Nothing from trio or libp2p leaks through the public methods:
library failures become `TransportError`.

Each setting below fixes a failure measured on py-libp2p 0.8.1 (see LIBP2P_NOTES.md):

- Noise is the only security transport. The library default also offers `/plaintext/2.0.0`,
  with which a peer can claim any peer ID.
- GossipSub is tuned for bursty RL traffic: heartbeat 1 s (default 120 s); the built-in
  spam protection (10 messages/s per topic per forwarder, dropped silently), eclipse
  protection (wants 3 distinct IPs) and adaptive gossip (which stretches the heartbeat to
  30-60 s when it judges the network unhealthy) are all off. Rate limits belong to the node.
- Per-peer outbound queues are deepened (library: 32 RPCs, full means silent drop) and
  publishing applies back-pressure: a message goes out only once every (still draining)
  peer queue is below a high-water mark, waiting a bounded time for it. `publish()` itself
  only queues (a bounded hand-off, so the caller is not paced by thread round trips).
  Whatever has queued up for a peer is sent as one batched RPC. A burst of hundreds of
  messages is then delivered in full; any RPC still dropped or discarded is counted.
- Accepted messages go straight from the pubsub layer into the bounded inbox; the
  library's 32-slot subscription channel (silent overflow) is bypassed entirely.
- Validators are wrapped with `run_validator`, so one that raises rejects the message
  instead of killing the host, and a rejection at the gossip validator also stops it
  from being forwarded. Rejections are counted by reason.
- One maximum message size on every node (`MAX_MESSAGE_SIZE`, 1 MiB of payload).
  `publish()` refuses anything larger with `TransportError` instead of letting it vanish.
- Pubsub and GossipSub are started before the host listens (a pubsub stream arriving
  first kills the host), and bootstrap dialing is ours: every bootstrap peer is retried
  forever with capped exponential backoff, and the node keeps running with none reachable.
- Message sequence numbers start from the wall clock in nanoseconds (library: seconds),
  so a node restarted under the same identity never reuses a sequence number that its
  peers still remember as seen (they would drop its messages for two minutes).
- The library's auto-connector is disabled: it dials any peer in the peerstore on its own
  schedule, around our allow-list and dial policy. Discovery is our own peer exchange.
- Large payloads go over a raw stream protocol (`BLOB_PROTOCOL`) with a length-prefixed
  request and response, read in a loop; RequestResponse fails above ~7 MB.

Failures found beyond those notes, and fixed here (details at `_SwarmPubsub`, SEND_STALL_S):
concurrent writes to one pubsub stream interleave their Yamux frames and corrupt it; an
unparsable RPC, or any error in a per-message task, stops the whole host; a failed stream
silently loses the peer's subscriptions for good; and two Yamux read loops that answer
pings inline can wedge a busy connection in both directions. Every handler that reads a
peer's bytes therefore contains its errors, and a peer whose queue stops moving for
SEND_STALL_S has its connection torn down (it reconnects clean).

What this class deliberately is not: a message decoder or verifier (the node checks
signatures and the claimed sender against `InboundMessage.source`), a store (gossip
delivers to peers that are connected now, and only to them), or a rate limiter.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import json
import logging
import os
import random
import re
import struct
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.abc import IHost, INetConn, INetStream, INetwork, INotifee
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.x25519 import create_new_key_pair as create_new_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.exceptions import BaseLibp2pError
from libp2p.network.config import ConnectionConfig, RetryConfig
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import InvalidAddrError, info_from_p2p_addr
from libp2p.peer.peerinfo import PeerInfo as Libp2pPeerInfo
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.pubsub.rpc_queue import RpcQueue
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from libp2p.tools.anyio_service import background_trio_service

from swarm.errors import TransportError
from swarm.p2p.identity import create_identity, load_or_create_identity, peer_id_of
from swarm.p2p.transport import (
    BlobServed,
    BoundedInbox,
    InboundMessage,
    PeerInfo,
    ServedBlobLog,
    Transport,
    TransportStats,
    Validator,
    run_validator,
)

logger = logging.getLogger(__name__)

# --- Wire constants: identical on every node, or nodes cannot talk (see module docstring). ---
MAX_MESSAGE_SIZE = 1024 * 1024  # largest gossip payload publish() accepts
# A payload travels inside an RPC with topic, seqno, signature, public key and the sender's
# signed peer record; this much headroom covers all of it.
RPC_OVERHEAD = 64 * 1024
BLOB_PROTOCOL = TProtocol("/swarm/blob/1.0.0")
PEER_EXCHANGE_PROTOCOL = TProtocol("/swarm/px/1.0.0")
# Only GossipSub v1.1 (with v1.0 as fallback): v1.2 adds an IDONTWANT control RPC per
# published message to every mesh peer, which doubles queue pressure on bursts and, with
# the library's 10-entry IDONTWANT memory, saves nothing on our message rates.
GOSSIP_PROTOCOLS = (PROTOCOL_ID_V11, PROTOCOL_ID)

DEFAULT_LISTEN_ADDR = "/ip4/127.0.0.1/tcp/0"
DEFAULT_INBOX_CAPACITY = 4096
DEFAULT_DIAL_TIMEOUT = 10.0

# --- Tuning; none of these need to match across nodes. ---
# Mesh degree D (the GossipSub spec's default): each node forwards every message to about D
# peers, so a network carries about N*D copies of each message to deliver it to N-1 nodes,
# and each copy costs py-libp2p on the order of a millisecond of CPU at both ends. A lower
# D (a constructor option) saves CPU on small machines at the cost of redundancy.
DEFAULT_MESH_DEGREE = 6
HEARTBEAT_INTERVAL_S = 1
OUTBOUND_QUEUE_DEPTH = 4096  # RPCs per peer; library default 32
# publish() waits while any peer queue holds more than this many RPCs...
QUEUE_HIGH_WATER = 256
# ...or more than this many bytes' worth of messages of the size being published.
QUEUE_BYTES_BUDGET = 32 * 1024 * 1024
# Queued RPCs to one peer are sent as one RPC of up to this many bytes (see _SwarmPubsub).
RPC_BATCH_BYTES = 512 * 1024
PUBLISH_WAIT_S = 10.0  # back-pressure is bounded: after this, publish anyway and count it
# publish() hands messages to the network thread through this many slots (or bytes); it
# blocks, for at most publish_wait, while they are full.
OUTBOX_MESSAGES = 1024
OUTBOX_BYTES = 64 * 1024 * 1024
BACKPRESSURE_POLL_S = 0.001
BACKPRESSURE_STALL_S = 2.0
START_TIMEOUT_S = 30.0
CLOSE_GRACE_S = 3.0
MAINTAIN_INTERVAL_S = 0.5
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.5, 30.0
FORGET_AFTER_FAILURES = 8  # a peer learned by peer exchange (never a bootstrap peer)
# Peer exchange asks every peer once, soon after start, then one random peer per interval:
# each ask opens a stream, and stream opens are not free (see SEND_STALL_S).
PX_FIRST_DELAY_S, PX_INTERVAL_S = 0.5, 5.0
# A peer whose outbound queue has not moved for this long gets its connection torn down.
# py-libp2p's Yamux answers pings and stream opens inline in its read loop, so when both
# directions of a connection are full the two read loops can wait on each other forever;
# a frozen or malicious peer that stops reading pins our queue the same way.
SEND_STALL_S = 10.0
PX_MAX_PEERS = 64
PX_MAX_RESPONSE = 64 * 1024
STREAM_IO_TIMEOUT_S = 10.0
BLOB_CHUNK = 1024 * 1024
MAX_BLOB_KEY = 1024
DEFAULT_MAX_BLOB_SIZE = 1024 * 1024 * 1024
DEFAULT_MAX_PEERS = 32

_BLOB_OK, _BLOB_MISSING = 0, 1
_BLOB_HEADER = struct.Struct(">BQ")  # status, total length
_U32 = struct.Struct(">I")
_PSK_RE = re.compile(r"^[0-9a-fA-F]{64}$")

# The peer that handed us a message (not necessarily its origin), for the current pubsub task.
_FORWARDER: contextvars.ContextVar[ID | None] = contextvars.ContextVar("forwarder", default=None)

# Library errors we expect on the network (closed streams, failed dials, timeouts, bad data).
_NET_ERRORS = (BaseLibp2pError, OSError, trio.TooSlowError, trio.BrokenResourceError, ValueError)


@dataclass(frozen=True)
class Libp2pInboundMessage(InboundMessage):
    """An `InboundMessage` that also names the peer which forwarded it to us (for latency stats)."""

    forwarder: str = ""


@dataclass
class Libp2pStats(TransportStats):
    """`TransportStats` plus the libp2p-specific counters that show where anything was lost."""

    outbound_dropped: int = 0  # RPCs a full per-peer queue refused
    outbound_discarded: int = 0  # RPCs still queued for a peer when its stream died
    backpressure_waits: int = 0  # publishes that had to wait for queues to drain
    backpressure_timeouts: int = 0  # publishes that gave up waiting and went out anyway
    publish_errors: int = 0  # queued messages the library failed to publish
    dial_failures: int = 0
    refused_peers: int = 0  # connections closed because the peer is not on the allow-list
    stalled_peers: int = 0  # connections torn down because their outbound queue was stuck
    handler_errors: collections.Counter = field(default_factory=collections.Counter)  # where -> n

    def as_dict(self) -> dict:
        base = super().as_dict()
        base.update(
            outbound_dropped=self.outbound_dropped,
            outbound_discarded=self.outbound_discarded,
            backpressure_waits=self.backpressure_waits,
            backpressure_timeouts=self.backpressure_timeouts,
            publish_errors=self.publish_errors,
            dial_failures=self.dial_failures,
            refused_peers=self.refused_peers,
            stalled_peers=self.stalled_peers,
            handler_errors=dict(self.handler_errors),
        )
        return base


@dataclass
class _KnownPeer:
    """A peer we try to stay connected to: a bootstrap peer (forever) or one learned by exchange."""

    addrs: list[multiaddr.Multiaddr]
    bootstrap: bool
    failures: int = 0
    next_attempt: float = 0.0
    dialing: bool = False


# ----------------------------------------------------------------------------------------
# Small framing helpers for our two stream protocols (run on the trio thread).
# ----------------------------------------------------------------------------------------


class _StreamProtocolError(Exception):
    """The remote end of one of our stream protocols sent something malformed or stopped early."""


async def _read_exactly(stream: INetStream, size: int) -> bytes:
    """Read exactly `size` bytes, looping over partial reads (a muxer hands out what it has)."""
    buffer = bytearray()
    while len(buffer) < size:
        try:
            chunk = await stream.read(size - len(buffer))
        except EOFError:  # StreamEOF is an EOFError
            chunk = b""
        if not chunk:
            raise _StreamProtocolError(f"stream ended after {len(buffer)} of {size} bytes")
        buffer += chunk
    return bytes(buffer)


async def _read_frame(stream: INetStream, max_size: int) -> bytes:
    (size,) = _U32.unpack(await _read_exactly(stream, _U32.size))
    if size > max_size:
        raise _StreamProtocolError(f"frame of {size} bytes exceeds the limit of {max_size}")
    return await _read_exactly(stream, size)


def _frame(payload: bytes) -> bytes:
    return _U32.pack(len(payload)) + payload


async def _reset_quietly(stream: INetStream) -> None:
    # Best effort on a stream that already failed; its own error is what gets reported.
    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
        try:
            await stream.reset()
        except _NET_ERRORS:
            pass


async def _close_quietly(stream: INetStream) -> None:
    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
        try:
            await stream.close()
        except _NET_ERRORS:
            pass


# ----------------------------------------------------------------------------------------
# libp2p pieces we adjust.
# ----------------------------------------------------------------------------------------


class _TunedQueues(dict):
    """`Pubsub.peer_queues` replacement: deepens each per-peer RPC queue as pubsub registers it.

    Pubsub builds every queue with the library defaults (32 RPCs, 1 MiB) and hands the same
    object to that peer's sending task, so the queue must be tuned in place at the moment
    it is stored, which is this `__setitem__`.
    """

    def __init__(
        self,
        depth: int,
        max_rpc_size: int,
        on_drop: Callable[[], None],
        on_discard: Callable[[int], None],
    ) -> None:
        super().__init__()
        self._depth = depth
        self._max_rpc_size = max_rpc_size
        self._on_drop = on_drop
        self._on_discard = on_discard

    def __setitem__(self, peer_id: ID, queue: RpcQueue) -> None:
        # RpcQueue exposes no setter for its depth; `_queue.max_size` is its only knob (0.8.1).
        queue._queue.max_size = self._depth
        queue.max_message_size = self._max_rpc_size
        queue.push = self._counting_push(queue)
        queue.close = self._counting_close(queue)
        super().__setitem__(peer_id, queue)

    def _counting_close(self, queue: RpcQueue) -> Callable[[], None]:
        # Pubsub closes a peer's queue when its stream dies; whatever is still in it is lost.
        original_close = queue.close
        on_discard = self._on_discard

        def close() -> None:
            if not queue.closed and len(queue) > 0:
                on_discard(len(queue))
            original_close()

        return close

    def _counting_push(self, queue: RpcQueue) -> Callable[..., bool]:
        original_push = queue.push
        on_drop = self._on_drop

        def push(rpc: rpc_pb2.RPC, priority: bool = False) -> bool:
            accepted = original_push(rpc, priority)
            if not accepted and not queue.closed:  # a closed queue is a departed peer, not a drop
                on_drop()
            return accepted

        return push


class _SwarmGossipSub(GossipSub):
    """GossipSub without its equivocation record.

    The library keeps the full body of up to 1000 recent messages (trimmed to 500 only when
    it overflows) to spot a sender reusing a sequence number for different content: up to
    a gigabyte at 1 MiB per message. Nothing is lost by skipping it: message IDs are
    (sender, sequence number), so the seen-cache already drops a second message with a
    reused number, and equivocation penalties only feed a score we do not use.
    """

    def _check_equivocation(self, msg: rpc_pb2.Message) -> bool:
        return True


class _SwarmPubsub(Pubsub):
    """Pubsub with deep outbound queues, batched sends, direct delivery and hardened input.

    What it changes in the library's Pubsub (0.8.1), and why:

    - `notify_subscriptions`: the library puts each validated message into a 32-slot
      channel and drops it when full; here it goes to `deliver` (our bounded, counting
      inbox). `push_msg` records which peer forwarded the message, for that callback.
    - `handle_sending_messages` sends whatever has queued up for a peer as one RPC. The
      library writes one RPC per message; each write costs a muxer frame, an encryption,
      a syscall and, at the receiver, a read, a decryption, a parse and a signed-record check.
    - `write_msg` holds a per-stream lock. The library writes to a peer's stream from
      several tasks (the send loop, the pending-message flush, the recent-message replay)
      and Yamux interleaves the frames of concurrent writes above 64 KiB, which corrupts
      the stream; the receiver then fails to parse it.
    - `stream_handler` and `push_msg` contain any error caused by a peer's bytes. In the
      library an unparsable RPC, or any error in a per-message task, escapes into the
      swarm's task group and stops the whole host.
    - A peer whose stream fails gets its *connection* closed. The library only drops the
      stream and with it the peer's subscriptions, which the peer never re-announces on the
      connection it still has, so it would be cut off from our messages for good.
    """

    def __init__(
        self,
        host: IHost,
        router: GossipSub,
        *,
        deliver: Callable[[rpc_pb2.Message, ID | None], None],
        on_queue_drop: Callable[[], None],
        on_queue_discard: Callable[[int], None],
        on_peer_error: Callable[[str, BaseException], None],
        queue_depth: int,
        max_rpc_size: int,
    ) -> None:
        super().__init__(host, router, strict_signing=True, max_inbound_rpc_size=max_rpc_size)
        self._deliver = deliver
        self._on_peer_error = on_peer_error
        self.peer_queues = _TunedQueues(queue_depth, max_rpc_size, on_queue_drop, on_queue_discard)
        self._write_locks: weakref.WeakKeyDictionary[INetStream, trio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        # peer -> trio time its send loop last made progress (started, or finished a write)
        self.send_progress: dict[ID, float] = {}
        # Sequence numbers must never repeat under one identity, across restarts too; the
        # library seeds them with time in seconds, which a restart within seconds reuses.
        self.counter = time.time_ns()

    def notify_subscriptions(self, publish_message: rpc_pb2.Message) -> None:
        self._deliver(publish_message, _FORWARDER.get())

    async def write_msg(self, stream: INetStream, rpc_msg: rpc_pb2.RPC) -> bool:
        lock = self._write_locks.get(stream)
        if lock is None:
            lock = self._write_locks[stream] = trio.Lock()
        async with lock:
            return await super().write_msg(stream, rpc_msg)

    async def handle_sending_messages(
        self, peer_id: ID, stream: INetStream, queue: RpcQueue
    ) -> None:
        carry: rpc_pb2.RPC | None = None
        try:
            while True:
                self.send_progress[peer_id] = trio.current_time()
                first = carry if carry is not None else await queue.pop()
                if first is None:
                    return  # queue closed: the peer is gone
                batch, carry = _coalesce(first, queue, min(RPC_BATCH_BYTES, queue.max_message_size))
                if not await self.write_msg(stream, batch):
                    return
        except Exception as exc:  # noqa: BLE001 - as in the library: a failed send loop = dead peer
            self._on_peer_error("send", exc)
            await self._drop_peer(peer_id)

    async def stream_handler(self, stream: INetStream) -> None:
        peer_id = stream.muxed_conn.peer_id
        try:
            await super().stream_handler(stream)
        except Exception as exc:  # noqa: BLE001 - a peer's bytes must never stop the host
            self._on_peer_error("receive", exc)
            await _reset_quietly(stream)
            await self._drop_peer(peer_id)

    async def push_msg(self, msg_forwarder: ID, msg: rpc_pb2.Message) -> None:
        token = _FORWARDER.set(msg_forwarder)
        try:
            await super().push_msg(msg_forwarder, msg)
        except Exception as exc:  # noqa: BLE001 - a bad message is dropped, never fatal
            if msg_forwarder == self.my_id:
                raise  # our own publish: the publisher task counts it
            self._on_peer_error("message", exc)
        finally:
            _FORWARDER.reset(token)

    async def _drop_peer(self, peer_id: ID) -> None:
        """Forget the peer and close its connection, so that a reconnect starts clean."""
        self._handle_dead_peer(peer_id)
        await _abort_peer_connections(self.host.get_network(), peer_id)


async def _abort_peer_connections(network: INetwork, peer_id: ID) -> None:
    """Close every connection to a peer, sockets first.

    A graceful close writes a GO_AWAY frame behind the connection's write lock, so it
    queues behind any write that is stuck on a full socket and never finishes. Closing the
    socket first fails every task blocked on it; the swarm's own close then cleans up.
    """
    conns = list(network.get_connections(peer_id))
    for conn in conns:
        secured = getattr(conn.muxed_conn, "secured_conn", None)
        if secured is None:
            continue
        with trio.move_on_after(1.0):
            try:
                await secured.close()
            except (*_NET_ERRORS, trio.ClosedResourceError) as exc:
                logger.debug("closing the socket to %s: %s", peer_id, exc)
    for conn in conns:
        with trio.move_on_after(CLOSE_GRACE_S):
            try:
                await conn.close()
            except (*_NET_ERRORS, trio.ClosedResourceError) as exc:
                logger.debug("closing the connection to %s: %s", peer_id, exc)


def _coalesce(
    first: rpc_pb2.RPC, queue: RpcQueue, limit: int
) -> tuple[rpc_pb2.RPC, rpc_pb2.RPC | None]:
    """Merge RPCs already waiting in `queue` into `first`, up to `limit` bytes.

    Returns the batch and the first RPC that did not fit (to send next), if any. Merging
    concatenates the publish, subscription and control lists, which is what a GossipSub
    RPC carrying several messages is; the sender's signed record is the same in all.
    """
    if len(queue) == 0:
        return first, None
    batch = rpc_pb2.RPC()
    batch.CopyFrom(first)
    size = batch.ByteSize()
    while len(queue) > 0:
        # RpcQueue has only an async pop; its PriorityQueue pops synchronously (0.8.1).
        following = queue._queue.pop()
        if following is None:
            break
        following_size = following.ByteSize()
        if size + following_size > limit:
            return batch, following
        batch.MergeFrom(following)
        size += following_size
    return batch, None


class _AllowListNotifee(INotifee):
    """Closes every connection whose (Noise-authenticated) peer ID is not on the allow-list.

    The library's connection gate filters by IP only; this is the peer-ID gate. Messages
    and streams from unlisted peers are also refused where they arrive, in case one slips
    in before its connection is closed.
    """

    def __init__(self, is_allowed: Callable[[ID], bool], on_refused: Callable[[ID], None]) -> None:
        self._is_allowed = is_allowed
        self._on_refused = on_refused

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        peer_id = conn.muxed_conn.peer_id
        if self._is_allowed(peer_id):
            return
        self._on_refused(peer_id)
        try:
            await conn.close()
        except _NET_ERRORS as exc:
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


# ----------------------------------------------------------------------------------------
# Argument parsing (constructor arguments are plain values; errors name the bad value).
# ----------------------------------------------------------------------------------------


def _parse_listen_addr(addr: str) -> multiaddr.Multiaddr:
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


def _parse_bootstrap(addrs: Iterable[str]) -> list[Libp2pPeerInfo]:
    infos: dict[ID, Libp2pPeerInfo] = {}
    for addr in addrs:
        try:
            info = info_from_p2p_addr(multiaddr.Multiaddr(addr))
        except (InvalidAddrError, ValueError, TypeError) as exc:
            raise TransportError(
                f"invalid bootstrap address {addr!r} (needs a trailing /p2p/<peer id>): {exc}"
            ) from exc
        if info.peer_id in infos:
            infos[info.peer_id].addrs.extend(info.addrs)
        else:
            infos[info.peer_id] = info
    return list(infos.values())


def _parse_psk(psk: str | None) -> str | None:
    if psk is None:
        return None
    if not _PSK_RE.match(psk):
        raise TransportError("a private-network key (psk) must be exactly 64 hex characters")
    return psk.lower()


def _parse_allow_list(allow_list: Iterable[str] | None) -> frozenset[str] | None:
    if allow_list is None:
        return None
    parsed = set()
    for peer in allow_list:
        try:
            parsed.add(ID.from_base58(peer).to_base58())
        except ValueError as exc:
            raise TransportError(f"invalid peer ID in allow-list: {peer!r}") from exc
    return frozenset(parsed)


def _resolve_key_pair(
    key_pair: KeyPair | None, identity_path: str | os.PathLike[str] | None
) -> KeyPair:
    if key_pair is not None and identity_path is not None:
        raise TransportError("give either key_pair or identity_path, not both")
    if key_pair is not None:
        return key_pair
    if identity_path is not None:
        return load_or_create_identity(identity_path)
    # An ephemeral identity: fine for tests and benchmarks, useless for a node that restarts.
    return create_identity()


# ----------------------------------------------------------------------------------------
# The transport.
# ----------------------------------------------------------------------------------------


class Libp2pTransport(Transport):
    """A `Transport` over libp2p: GossipSub for messages, raw streams for blobs, TCP only.

    Construct with plain values, then `start()` (or use it as a context manager). All public
    methods are for the node's thread; they block on the network thread for at most their
    stated bounds and raise `TransportError` on failure. Calling them from inside a
    validator (which runs on the network thread) is refused.

    Arguments:
        key_pair / identity_path: the node identity (a key pair, or a key file that is
            created on first use). Neither: a fresh random identity, for tests.
        listen_addr: "/ip4/<ip>/tcp/<port>"; port 0 picks a free port (see listen_addrs()).
        bootstrap: full multiaddrs with /p2p/<peer id>; each is dialed, and re-dialed with
            backoff whenever the connection drops, forever.
        topics: topics to subscribe to at start, without a validator.
        psk: optional private-network key (64 hex characters). Not compatible with go/rust pnet.
        allow_list: optional peer IDs; connections from any other peer are closed.
        max_message_size: largest payload publish() accepts. Must be the same on every node.
        inbox_capacity: received messages kept until receive(); the oldest are dropped
            (and counted) beyond it.
        dial_timeout: bound on each dial, in seconds.
        max_peers: stop dialing peers learned by peer exchange at this many connections.
        mesh_degree: GossipSub D (mesh peers per topic); D_lo = D*2//3, D_hi = 2*D.
        peer_exchange: ask connected peers for their peers, so a node bootstrapped from
            one peer finds the rest.
        max_blob_size: largest blob fetch_blob() accepts from a peer.
        publish_wait: bound, in seconds, on publish()'s wait for outbound queues to drain.
    """

    def __init__(
        self,
        *,
        key_pair: KeyPair | None = None,
        identity_path: str | os.PathLike[str] | None = None,
        listen_addr: str = DEFAULT_LISTEN_ADDR,
        bootstrap: Sequence[str] = (),
        topics: Sequence[str] = (),
        psk: str | None = None,
        allow_list: Iterable[str] | None = None,
        max_message_size: int = MAX_MESSAGE_SIZE,
        inbox_capacity: int = DEFAULT_INBOX_CAPACITY,
        dial_timeout: float = DEFAULT_DIAL_TIMEOUT,
        max_peers: int = DEFAULT_MAX_PEERS,
        mesh_degree: int = DEFAULT_MESH_DEGREE,
        peer_exchange: bool = True,
        max_blob_size: int = DEFAULT_MAX_BLOB_SIZE,
        publish_wait: float = PUBLISH_WAIT_S,
    ) -> None:
        if max_message_size <= 0:
            raise TransportError("max_message_size must be positive")
        if dial_timeout <= 0:
            raise TransportError("dial_timeout must be positive")
        self._key_pair = _resolve_key_pair(key_pair, identity_path)
        self.peer_id = peer_id_of(self._key_pair)
        self._my_id = ID.from_pubkey(self._key_pair.public_key)
        self._listen_addr = _parse_listen_addr(listen_addr)
        self._bootstrap = [
            info for info in _parse_bootstrap(bootstrap) if info.peer_id != self._my_id
        ]
        self._initial_topics = list(dict.fromkeys(topics))
        self._psk = _parse_psk(psk)
        self._allow_list = _parse_allow_list(allow_list)
        self._max_message_size = max_message_size
        self._max_rpc_size = max_message_size + RPC_OVERHEAD
        self._dial_timeout = float(dial_timeout)
        self._max_peers = max_peers
        if mesh_degree < 1:
            raise TransportError("mesh_degree must be at least 1")
        self._mesh_degree = mesh_degree
        self._peer_exchange = peer_exchange
        self._max_blob_size = max_blob_size
        self._publish_wait = float(publish_wait)
        try:
            self._inbox = BoundedInbox(inbox_capacity)
        except ValueError as exc:
            raise TransportError(str(exc)) from exc

        self._stats = Libp2pStats()
        self._stats_lock = threading.Lock()
        self._blobs: dict[str, bytes] = {}
        self._blobs_lock = threading.Lock()
        self._served = ServedBlobLog()
        self._peer_strs: dict[bytes, str] = {}
        self._subscribed: set[str] = set()
        self._known: dict[ID, _KnownPeer] = {}
        # publish() -> network thread handoff (see _publisher): FIFO, bounded, thread-safe.
        self._outbox: collections.deque[tuple[str, bytes]] = collections.deque()
        self._outbox_bytes = 0
        self._outbox_cond = threading.Condition()
        self._outbox_wake_scheduled = False
        self._outbox_event: trio.Event | None = None

        self._lifecycle_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._closed = False
        self._failure: BaseException | None = None
        self._trio_token: trio.lowlevel.TrioToken | None = None
        self._listen_addrs: list[str] = []
        # Set on the trio thread while it runs.
        self._host: IHost | None = None
        self._pubsub: _SwarmPubsub | None = None
        self._gossipsub: GossipSub | None = None
        self._nursery: trio.Nursery | None = None
        self._stop_event: trio.Event | None = None
        self._root_scope: trio.CancelScope | None = None

    # ------------------------------------------------------------------ lifecycle (node thread)

    def start(self) -> None:
        """Start the network thread, listen, subscribe to `topics` and begin dialing.

        Returns once the host listens (the bootstrap peers may not be connected yet; see
        `wait_for_topic_peers`). A second call on a running transport does nothing.
        """
        with self._lifecycle_lock:
            if self._closed:
                raise TransportError("this transport was closed; create a new one")
            if self._thread is not None:
                return
            self._thread = threading.Thread(
                target=self._thread_main, name=f"libp2p-{self.peer_id[-8:]}", daemon=True
            )
            self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            self.close()
            raise TransportError(f"the libp2p host did not start within {START_TIMEOUT_S:.0f} s")
        if self._failure is not None:
            failure = self._failure
            self.close()
            raise TransportError(f"the libp2p host failed to start: {failure}") from failure

    def close(self) -> None:
        """Stop the host and its thread: graceful for up to CLOSE_GRACE_S, then cancelled."""
        with self._lifecycle_lock:
            thread, token = self._thread, self._trio_token
            self._closed = True
        if thread is None or not thread.is_alive():
            return
        if threading.current_thread() is thread:
            raise TransportError("close() must not be called from the network thread")
        if token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._request_stop, trio_token=token)
        thread.join(CLOSE_GRACE_S + 2.0)
        if thread.is_alive():
            logger.warning(
                "libp2p thread of %s did not stop within %.0f s", self.peer_id, CLOSE_GRACE_S + 2.0
            )

    def _thread_main(self) -> None:
        try:
            trio.run(self._run_host)
        except Exception as exc:  # noqa: BLE001 - thread boundary: record, report via start()/calls
            self._failure = exc
            if self._ready.is_set():
                logger.error("libp2p host of %s stopped with an error: %r", self.peer_id, exc)
        finally:
            self._ready.set()

    def _request_stop(self) -> None:
        if self._stop_event is not None:
            self._stop_event.set()
        if self._root_scope is not None:
            # Graceful shutdown gets a bounded time; a library task that hangs is cancelled.
            self._root_scope.deadline = min(
                self._root_scope.deadline, trio.current_time() + CLOSE_GRACE_S
            )

    # ------------------------------------------------------------------ the trio side

    async def _run_host(self) -> None:
        self._trio_token = trio.lowlevel.current_trio_token()
        self._stop_event = trio.Event()
        self._outbox_event = trio.Event()
        host = self._build_host()
        gossipsub = self._build_gossipsub()
        pubsub = _SwarmPubsub(
            host,
            gossipsub,
            deliver=self._deliver,
            on_queue_drop=self._count_queue_drop,
            on_queue_discard=self._count_queue_discard,
            on_peer_error=self._count_peer_error,
            queue_depth=OUTBOUND_QUEUE_DEPTH,
            max_rpc_size=self._max_rpc_size,
        )
        self._host, self._pubsub, self._gossipsub = host, pubsub, gossipsub
        host.set_stream_handler(BLOB_PROTOCOL, self._handle_blob_stream)
        host.set_stream_handler(PEER_EXCHANGE_PROTOCOL, self._handle_px_stream)
        if self._allow_list is not None:
            host.get_network().register_notifee(
                _AllowListNotifee(self._peer_allowed, self._count_refused)
            )
        with trio.CancelScope() as root_scope:
            self._root_scope = root_scope
            # Pubsub and GossipSub run before the host listens: an inbound pubsub stream that
            # arrives before Pubsub's service manager exists kills the host.
            async with background_trio_service(pubsub), background_trio_service(gossipsub):
                await pubsub.wait_until_ready()
                for topic in self._initial_topics:
                    await self._subscribe(topic, None)
                async with host.run([self._listen_addr]), trio.open_nursery() as nursery:
                    self._nursery = nursery
                    self._listen_addrs = [
                        f"{addr}/p2p/{self.peer_id}" for addr in host.get_transport_addrs()
                    ]
                    if not self._listen_addrs:
                        raise TransportError(f"the host is not listening on {self._listen_addr}")
                    self._start_background_tasks(nursery)
                    self._ready.set()
                    await self._stop_event.wait()
                    # Let what was already published leave before the connections close.
                    await self._flush(CLOSE_GRACE_S / 2)
                    nursery.cancel_scope.cancel()

    def _build_host(self) -> IHost:
        noise = NoiseTransport(
            self._key_pair, noise_privkey=create_new_x25519_key_pair().private_key
        )
        host = new_host(
            key_pair=self._key_pair,
            listen_addrs=[self._listen_addr],
            sec_opt={NOISE_PROTOCOL_ID: noise},  # Noise only: no plaintext, no impersonation
            muxer_opt=_yamux_only(),
            psk=self._psk,
            enable_mDNS=False,
            connection_config=ConnectionConfig(dial_timeout=self._dial_timeout),
            # Identify's "observed address" of an outbound connection is an ephemeral port;
            # advertising it would hand peers addresses nobody listens on.
            disable_identify_address_discovery=True,
        )
        network = host.get_network()
        # Our maintenance loop retries with its own backoff; the swarm's extra retries only
        # stretch each failed dial.
        network.retry_config = RetryConfig(max_retries=0)
        # The auto-connector dials anything in the peerstore on its own schedule (around the
        # allow-list and our backoff); leaving it unstarted keeps dialing in one place.
        network.auto_connector.start = _never_start
        return host

    def _build_gossipsub(self) -> GossipSub:
        return _SwarmGossipSub(
            protocols=list(GOSSIP_PROTOCOLS),
            degree=self._mesh_degree,
            degree_low=max(1, self._mesh_degree * 2 // 3),
            degree_high=2 * self._mesh_degree,
            heartbeat_interval=HEARTBEAT_INTERVAL_S,
            heartbeat_initial_delay=0.1,
            spam_protection_enabled=False,
            eclipse_protection_enabled=False,
            adaptive_gossip_enabled=False,
        )

    def _start_background_tasks(self, nursery: trio.Nursery) -> None:
        now = trio.current_time()
        for info in self._bootstrap:
            self._known[info.peer_id] = _KnownPeer(
                addrs=list(info.addrs), bootstrap=True, next_attempt=now
            )
        nursery.start_soon(self._maintain_connections)
        nursery.start_soon(self._publisher)
        nursery.start_soon(self._watch_send_queues)
        if self._peer_exchange:
            nursery.start_soon(self._exchange_peers_loop)

    # ------------------------------------------------------------------ connections (trio side)

    def _connected_peers(self) -> list[ID]:
        network = self._host.get_network()
        return [
            peer_id
            for peer_id, conns in list(network.connections.items())
            if any(not conn.is_closed for conn in conns)
        ]

    def _is_connected(self, peer_id: ID) -> bool:
        conns = self._host.get_network().connections.get(peer_id, ())
        return any(not conn.is_closed for conn in conns)

    async def _maintain_connections(self) -> None:
        """Keep dialing known peers that are not connected, each with its own capped backoff."""
        while True:
            now = trio.current_time()
            connected = len(self._connected_peers())
            for peer_id, known in list(self._known.items()):
                if known.dialing or now < known.next_attempt or self._is_connected(peer_id):
                    continue
                if not known.bootstrap and connected >= self._max_peers:
                    continue
                known.dialing = True
                self._nursery.start_soon(self._dial_known, peer_id, known)
            await trio.sleep(MAINTAIN_INTERVAL_S)

    async def _dial_known(self, peer_id: ID, known: _KnownPeer) -> None:
        try:
            connected = await self._dial(peer_id, known.addrs)
        finally:
            known.dialing = False
        if connected:
            known.failures = 0
            return
        known.failures += 1
        if not known.bootstrap and known.failures >= FORGET_AFTER_FAILURES:
            self._known.pop(peer_id, None)
            return
        backoff = min(BACKOFF_MIN_S * 2 ** (known.failures - 1), BACKOFF_MAX_S)
        known.next_attempt = trio.current_time() + backoff * random.uniform(0.8, 1.2)

    async def _dial(self, peer_id: ID, addrs: list[multiaddr.Multiaddr]) -> bool:
        """One bounded dial. True if connected; failures are counted, never raised."""
        if peer_id == self._my_id or not self._peer_allowed(peer_id):
            return False
        network = self._host.get_network()
        # The swarm refuses, for 60 s, to dial a peer whose last dial failed; that would hide
        # a restarted peer from us. We keep our own backoff, so lift that block first.
        negative_cache = getattr(network, "_negative_peer_cache", None)
        if negative_cache is not None:
            negative_cache.evict(str(peer_id))
        with trio.move_on_after(self._dial_timeout):
            try:
                await self._host.connect(Libp2pPeerInfo(peer_id, addrs))
                return True
            except _NET_ERRORS as exc:
                logger.debug("dial %s failed: %s", peer_id, exc)
            except Exception as exc:  # noqa: BLE001 - library boundary: dial errors vary; counted
                self._count_handler_error("dial", exc)
        with self._stats_lock:
            self._stats.dial_failures += 1
        return False

    async def _watch_send_queues(self) -> None:
        """Tear down the connection of any peer whose outbound queue is stuck (see SEND_STALL_S)."""
        while True:
            await trio.sleep(1.0)
            now = trio.current_time()
            progress = self._pubsub.send_progress
            for peer_id in list(progress):
                queue = self._pubsub.peer_queues.get(peer_id)
                if queue is None:
                    progress.pop(peer_id, None)
                elif len(queue) > 0 and now - progress[peer_id] > SEND_STALL_S:
                    progress.pop(peer_id, None)
                    self._nursery.start_soon(self._abort_connections, peer_id)

    async def _abort_connections(self, peer_id: ID) -> None:
        logger.warning(
            "outbound queue to %s stuck for %.0f s; dropping its connection", peer_id, SEND_STALL_S
        )
        with self._stats_lock:
            self._stats.stalled_peers += 1
        await _abort_peer_connections(self._host.get_network(), peer_id)

    # ------------------------------------------------------------------ peer exchange (trio side)

    async def _exchange_peers_loop(self) -> None:
        """Ask peers for their peers; the maintenance loop then dials the new ones.

        Every peer connected by the first round is asked once; after that, one peer we
        have not asked yet (or, when there is none, a random one) per PX_INTERVAL_S.
        """
        await trio.sleep(PX_FIRST_DELAY_S)
        asked: set[ID] = set()
        while True:
            connected = self._connected_peers()
            fresh = [peer_id for peer_id in connected if peer_id not in asked]
            targets = fresh or connected
            if asked and len(targets) > 1:
                targets = [random.choice(targets)]
            async with trio.open_nursery() as nursery:
                for peer_id in targets:
                    asked.add(peer_id)
                    nursery.start_soon(self._ask_for_peers, peer_id)
            asked &= set(connected)
            await trio.sleep(PX_INTERVAL_S)

    async def _ask_for_peers(self, peer_id: ID) -> None:
        try:
            with trio.fail_after(STREAM_IO_TIMEOUT_S):
                stream = await self._host.new_stream(peer_id, [PEER_EXCHANGE_PROTOCOL])
                try:
                    payload = await _read_frame(stream, PX_MAX_RESPONSE)
                finally:
                    await _close_quietly(stream)
        except (*_NET_ERRORS, _StreamProtocolError) as exc:
            logger.debug("peer exchange with %s failed: %s", peer_id, exc)
            return
        except Exception as exc:  # noqa: BLE001 - library boundary: never stop the host; counted
            self._count_handler_error("peer_exchange_ask", exc)
            return
        now = trio.current_time()
        for found_id, addrs in _parse_px_payload(payload):
            if found_id == self._my_id or found_id in self._known or self._is_connected(found_id):
                continue
            if self._peer_allowed(found_id):
                self._known[found_id] = _KnownPeer(addrs=addrs, bootstrap=False, next_attempt=now)

    async def _handle_px_stream(self, stream: INetStream) -> None:
        remote = stream.muxed_conn.peer_id
        try:
            if not self._peer_allowed(remote):
                await _reset_quietly(stream)
                return
            payload = json.dumps({"peers": self._px_entries(exclude=remote)}).encode()
            with trio.fail_after(STREAM_IO_TIMEOUT_S):
                await stream.write(_frame(payload))
            await _close_quietly(stream)
        except Exception as exc:  # noqa: BLE001 - a peer's request must never stop the host
            self._count_handler_error("peer_exchange", exc)
            await _reset_quietly(stream)

    def _px_entries(self, exclude: ID) -> list[dict[str, Any]]:
        peerstore = self._host.get_peerstore()
        entries = []
        for peer_id in self._connected_peers():
            if peer_id == exclude or len(entries) >= PX_MAX_PEERS:
                continue
            try:
                addrs = [str(a) for a in peerstore.addrs(peer_id) if _is_dialable_tcp(a)]
            except (BaseLibp2pError, KeyError):
                continue
            if addrs:
                entries.append({"id": peer_id.to_base58(), "addrs": addrs[:4]})
        return entries

    # ------------------------------------------------------------------ blobs (trio side)

    async def _handle_blob_stream(self, stream: INetStream) -> None:
        """Serve one blob: read a length-prefixed key, answer with status, length, then the bytes."""
        try:
            if not self._peer_allowed(stream.muxed_conn.peer_id):
                await _reset_quietly(stream)
                return
            with trio.fail_after(STREAM_IO_TIMEOUT_S):
                key = (await _read_frame(stream, MAX_BLOB_KEY)).decode("utf-8")
            with self._blobs_lock:
                data = self._blobs.get(key)
            if data is None:
                with trio.fail_after(STREAM_IO_TIMEOUT_S):
                    await stream.write(_BLOB_HEADER.pack(_BLOB_MISSING, 0))
            else:
                await _write_chunked(stream, _BLOB_HEADER.pack(_BLOB_OK, len(data)), data)
                self._served.note(str(stream.muxed_conn.peer_id), key, len(data))
            await _close_quietly(stream)
        except Exception as exc:  # noqa: BLE001 - a peer's request must never stop the host
            self._count_handler_error("blob_serve", exc)
            await _reset_quietly(stream)

    async def _fetch_blob(self, peer_id: ID, key: str, timeout: float) -> bytes:
        try:
            with trio.fail_after(timeout):
                stream = await self._host.new_stream(peer_id, [BLOB_PROTOCOL])
                try:
                    await stream.write(_frame(key.encode("utf-8")))
                    header = await _read_exactly(stream, _BLOB_HEADER.size)
                    status, size = _BLOB_HEADER.unpack(header)
                    if status == _BLOB_MISSING:
                        raise TransportError(f"peer {peer_id} serves no blob {key!r}")
                    if status != _BLOB_OK or size > self._max_blob_size:
                        raise TransportError(
                            f"peer {peer_id} answered blob {key!r} with status {status}, {size} bytes"
                        )
                    data = await _read_exactly(stream, size)
                except BaseException:
                    await _reset_quietly(stream)
                    raise
                await _close_quietly(stream)
                return data
        except trio.TooSlowError:
            raise TransportError(
                f"fetching blob {key!r} from {peer_id} timed out after {timeout} s"
            ) from None
        except (*_NET_ERRORS, _StreamProtocolError) as exc:
            raise TransportError(f"fetching blob {key!r} from {peer_id} failed: {exc}") from exc

    # ------------------------------------------------------------------ pubsub (trio side)

    async def _subscribe(self, topic: str, validator: Validator | None) -> None:
        # The validator goes in first, so no message on the topic is ever accepted unchecked.
        self._pubsub.set_topic_validator(topic, self._gossip_validator(topic, validator), False)
        if topic not in self._subscribed:
            await self._pubsub.subscribe(topic)
            self._subscribed.add(topic)

    def _gossip_validator(
        self, topic: str, validator: Validator | None
    ) -> Callable[[ID, rpc_pb2.Message], bool]:
        """The libp2p-side validator: runs ours so that it can never raise, and counts rejections.

        Returning False here makes GossipSub drop the message *and not forward it*.
        """
        my_id_bytes = self._my_id.to_bytes()

        def gossip_validator(forwarder: ID, msg: rpc_pb2.Message) -> bool:
            if msg.from_id == my_id_bytes:
                return True  # our own publish: our peers validate it, as with MemoryTransport
            source = self._peer_str(msg.from_id)
            if not (self._peer_allowed(forwarder) and self._peer_str_allowed(source)):
                reason: str | None = "peer_not_allowed"
            else:
                message = InboundMessage(
                    topic=topic, data=bytes(msg.data), source=source, received_at=time.time()
                )
                reason = run_validator(validator, message)
            if reason is None:
                return True
            with self._stats_lock:
                self._stats.rejected[str(reason)] += 1
            return False

        return gossip_validator

    def _deliver(self, msg: rpc_pb2.Message, forwarder: ID | None) -> None:
        """Called by pubsub for every accepted message: straight into the inbox, counted."""
        if msg.from_id == self._my_id.to_bytes():
            return  # libp2p hands a subscribed publisher its own message; the contract does not
        source = self._peer_str(msg.from_id)
        forwarded_by = self._peer_str(forwarder.to_bytes()) if forwarder is not None else ""
        now = time.time()
        data = bytes(msg.data)
        for topic in msg.topicIDs:
            if topic not in self._subscribed:
                continue
            with self._stats_lock:
                self._stats.received += 1
            self._inbox.put(
                Libp2pInboundMessage(
                    topic=topic, data=data, source=source, received_at=now, forwarder=forwarded_by
                )
            )

    async def _publisher(self) -> None:
        """Publishes what publish() queued, in order, each after back-pressure allows it.

        publish() does not wait for the network thread to run each message: a thread
        round trip per message (and the GIL handoff it needs) capped a node at a few
        hundred messages/s. It queues instead, and this task drains the queue in batches.
        """
        while True:
            await self._outbox_event.wait()
            self._outbox_event = trio.Event()
            while (item := self._outbox_peek()) is not None:
                topic, data = item
                await self._wait_for_queue_room(len(data))
                try:
                    await self._pubsub.publish(topic, data)
                except Exception as exc:  # noqa: BLE001 - library boundary: counted, never fatal
                    logger.warning("publishing on %r failed: %r", topic, exc)
                    self._count_handler_error("publish", exc)
                    with self._stats_lock:
                        self._stats.publish_errors += 1
                else:
                    with self._stats_lock:
                        self._stats.published += 1
                self._outbox_pop()
                await trio.sleep(0)  # let the per-peer sending tasks run between messages

    def _outbox_peek(self) -> tuple[str, bytes] | None:
        with self._outbox_cond:
            if not self._outbox:
                self._outbox_wake_scheduled = False  # the next publish() must wake us again
                return None
            return self._outbox[0]

    def _outbox_pop(self) -> None:
        with self._outbox_cond:
            _, data = self._outbox.popleft()
            self._outbox_bytes -= len(data)
            self._outbox_cond.notify_all()

    def _wake_publisher(self) -> None:
        self._outbox_event.set()

    async def _flush(self, timeout: float) -> bool:
        """Wait until everything published has left the outbox and every peer queue is empty."""
        with trio.move_on_after(timeout):
            while self._outbox or self._pending_outbound() > 0:
                await trio.sleep(0.005)
            return True
        return False

    async def _wait_for_queue_room(self, size: int) -> None:
        """Back-pressure: wait (bounded) until every peer's outbound queue is below high water."""
        limit = max(4, min(QUEUE_HIGH_WATER, QUEUE_BYTES_BUDGET // max(size, 1)))
        if self._fullest_queue() <= limit:
            return
        deadline = trio.current_time() + self._publish_wait
        while self._fullest_queue() > limit:
            if trio.current_time() >= deadline:
                with self._stats_lock:
                    self._stats.backpressure_timeouts += 1
                logger.warning(
                    "publish waited %.1f s for outbound queues (fullest: %d RPCs); sending anyway",
                    self._publish_wait,
                    self._fullest_queue(),
                )
                return
            await trio.sleep(BACKPRESSURE_POLL_S)
        with self._stats_lock:
            self._stats.backpressure_waits += 1

    def _fullest_queue(self) -> int:
        """Length of the longest outbound queue that is still draining.

        A queue whose send loop has made no progress for BACKPRESSURE_STALL_S is left out:
        one frozen peer must not throttle publishing to everyone else (the watchdog drops
        it after SEND_STALL_S; what it misses meanwhile is counted as dropped).
        """
        now = trio.current_time()
        progress = self._pubsub.send_progress
        return max(
            (
                len(queue)
                for peer_id, queue in self._pubsub.peer_queues.items()
                if now - progress.get(peer_id, now) <= BACKPRESSURE_STALL_S
            ),
            default=0,
        )

    def _pending_outbound(self) -> int:
        return sum(len(queue) for queue in self._pubsub.peer_queues.values())

    async def _wait_for_topic_peers(self, topic: str, count: int, timeout: float) -> int:
        with trio.move_on_after(timeout):
            while len(self._gossipsub.mesh.get(topic, ())) < count:
                await trio.sleep(0.05)
        return len(self._gossipsub.mesh.get(topic, ()))

    def _peer_infos(self) -> list[PeerInfo]:
        peerstore = self._host.get_peerstore()
        infos = []
        for peer_id in self._connected_peers():
            try:
                addrs = tuple(str(a) for a in peerstore.addrs(peer_id))
            except (BaseLibp2pError, KeyError):
                addrs = ()
            infos.append(PeerInfo(peer_id=peer_id.to_base58(), addrs=addrs))
        return infos

    # ------------------------------------------------------------------ small shared helpers

    def _peer_str(self, peer_id_bytes: bytes) -> str:
        # base58 is pure Python and runs per message; a small cache keeps it off the hot path.
        cached = self._peer_strs.get(peer_id_bytes)
        if cached is None:
            if len(self._peer_strs) > 4096:
                self._peer_strs.clear()
            cached = self._peer_strs[peer_id_bytes] = ID(peer_id_bytes).to_base58()
        return cached

    def _peer_allowed(self, peer_id: ID) -> bool:
        return (
            self._allow_list is None
            or peer_id == self._my_id
            or self._peer_str(peer_id.to_bytes()) in self._allow_list
        )

    def _peer_str_allowed(self, peer_id: str) -> bool:
        return self._allow_list is None or peer_id == self.peer_id or peer_id in self._allow_list

    def _count_refused(self, peer_id: ID) -> None:
        logger.info("closing connection from %s: not on the allow-list", peer_id)
        with self._stats_lock:
            self._stats.refused_peers += 1

    def _count_queue_drop(self) -> None:
        with self._stats_lock:
            self._stats.outbound_dropped += 1

    def _count_peer_error(self, where: str, exc: BaseException) -> None:
        logger.warning("pubsub %s error caused by a peer (contained): %r", where, exc)
        self._count_handler_error(f"pubsub_{where}", exc)

    def _count_queue_discard(self, count: int) -> None:
        logger.warning("a peer stream died with %d RPCs still queued for it", count)
        with self._stats_lock:
            self._stats.outbound_discarded += count

    def _count_handler_error(self, where: str, exc: BaseException) -> None:
        logger.debug("%s: %s: %s", where, type(exc).__name__, exc)
        with self._stats_lock:
            self._stats.handler_errors[f"{where}:{type(exc).__name__}"] += 1

    # ------------------------------------------------------------------ public API (node thread)

    def _call(self, async_fn: Callable[..., Any], *args: Any) -> Any:
        """Run `async_fn(*args)` on the network thread and return its result."""
        token = self._running_token()
        try:
            return trio.from_thread.run(async_fn, *args, trio_token=token)
        except trio.RunFinishedError as exc:
            raise TransportError("the libp2p host has stopped") from exc

    def _call_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        token = self._running_token()
        try:
            return trio.from_thread.run_sync(fn, *args, trio_token=token)
        except trio.RunFinishedError as exc:
            raise TransportError("the libp2p host has stopped") from exc

    def _running_token(self) -> trio.lowlevel.TrioToken:
        if self._closed:
            raise TransportError("the transport is closed")
        if self._thread is None or not self._ready.is_set() or self._trio_token is None:
            raise TransportError("the transport is not started")
        if threading.current_thread() is self._thread:
            raise TransportError(
                "transport methods must not be called from the network thread (e.g. a validator)"
            )
        if self._failure is not None or not self._thread.is_alive():
            raise TransportError(f"the libp2p host has stopped: {self._failure}")
        return self._trio_token

    def subscribe(self, topic: str, validator: Validator | None = None) -> None:
        """Receive `topic`. `validator` runs on the network thread for each message: keep it cheap.

        Calling again for a subscribed topic replaces its validator.
        """
        if not topic:
            raise TransportError("a topic name must not be empty")
        self._call(self._subscribe, topic, validator)

    def publish(self, topic: str, data: bytes) -> None:
        """Queue `data` for gossip on `topic` and return; delivery happens on the network thread.

        Blocks (at most `publish_wait` s) while the hand-off queue is full, which it is when
        peers drain slower than the node publishes; raises `TransportError` if it stays full,
        if `data` exceeds the maximum message size, or if the transport is not running.
        Messages go out in publish order; `flush()` waits until they have left.
        """
        if len(data) > self._max_message_size:
            raise TransportError(
                f"message of {len(data)} bytes exceeds the maximum of {self._max_message_size}; "
                "send large payloads as blobs"
            )
        if not topic:
            raise TransportError("a topic name must not be empty")
        token = self._running_token()
        payload = bytes(data)
        with self._outbox_cond:
            self._wait_for_outbox_room(len(payload))
            self._outbox.append((topic, payload))
            self._outbox_bytes += len(payload)
            wake = not self._outbox_wake_scheduled
            self._outbox_wake_scheduled = True
        if wake:  # one wake-up per batch, not per message
            try:
                token.run_sync_soon(self._wake_publisher)
            except trio.RunFinishedError as exc:
                raise TransportError("the libp2p host has stopped") from exc

    def _wait_for_outbox_room(self, size: int) -> None:
        """Called with `_outbox_cond` held: wait, bounded, for a free slot and enough bytes."""
        deadline = time.monotonic() + self._publish_wait
        while self._outbox and (
            len(self._outbox) >= OUTBOX_MESSAGES or self._outbox_bytes + size > OUTBOX_BYTES
        ):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TransportError(
                    f"publish gave up after {self._publish_wait:.0f} s: peers are not draining "
                    f"({len(self._outbox)} messages still waiting to go out)"
                )
            if self._closed or self._failure is not None:
                raise TransportError("the libp2p host has stopped")
            self._outbox_cond.wait(min(remaining, 0.5))

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every published message has been handed to every peer's connection.

        True if that happened within `timeout` s. (It does not mean peers processed them.)
        """
        return self._call(self._flush, float(timeout))

    def receive(
        self, max_messages: int | None = None, timeout: float = 0.0
    ) -> list[InboundMessage]:
        return self._inbox.drain(max_messages, timeout)

    def peers(self) -> list[PeerInfo]:
        return self._call_sync(self._peer_infos)

    def listen_addrs(self) -> list[str]:
        if not self._ready.is_set() or self._failure is not None:
            raise TransportError("the transport is not started")
        return list(self._listen_addrs)

    def serve_blob(self, key: str, data: bytes) -> None:
        """Serve `data` under `key` to any (allowed) peer until `unserve_blob` or close."""
        if len(key.encode("utf-8")) > MAX_BLOB_KEY:
            raise TransportError(f"a blob key is at most {MAX_BLOB_KEY} bytes")
        with self._blobs_lock:
            self._blobs[key] = bytes(data)

    def unserve_blob(self, key: str) -> None:
        """Stop serving `key` (and free its memory). Unknown keys are ignored."""
        with self._blobs_lock:
            self._blobs.pop(key, None)

    def fetch_blob(self, peer_id: str, key: str, timeout: float = 30.0) -> bytes:
        """Fetch a blob from a peer (dialing it from the peerstore if needed), within `timeout` s."""
        if len(key.encode("utf-8")) > MAX_BLOB_KEY:
            raise TransportError(f"a blob key is at most {MAX_BLOB_KEY} bytes")
        try:
            target = ID.from_base58(peer_id)
        except ValueError as exc:
            raise TransportError(f"not a peer ID: {peer_id!r}") from exc
        return self._call(self._fetch_blob, target, key, float(timeout))

    def served_blobs(self) -> list[BlobServed]:
        return self._served.drain()

    def stats(self) -> Libp2pStats:
        """A consistent snapshot of the counters (not a live view)."""
        with self._stats_lock:
            snapshot = dataclasses.replace(self._stats)
            snapshot.rejected = collections.Counter(self._stats.rejected)
            snapshot.handler_errors = collections.Counter(self._stats.handler_errors)
        snapshot.inbox_dropped = self._inbox.dropped
        return snapshot

    def wait_for_topic_peers(self, topic: str, count: int = 1, timeout: float = 10.0) -> int:
        """Wait until `count` peers are in this node's gossip mesh for `topic` (or `timeout` s).

        Returns how many there are. Gossip only reaches peers that are meshed when a message
        is published, so a node (or test) that must not lose its first messages waits here.
        """
        return self._call(self._wait_for_topic_peers, topic, count, float(timeout))


# ----------------------------------------------------------------------------------------
# Module helpers.
# ----------------------------------------------------------------------------------------


async def _never_start() -> None:
    """Stands in for AutoConnector.start, so the auto-connector never runs (see _build_host)."""


def _yamux_only() -> dict[TProtocol, Any]:
    # Mplex measured 20-40 MB/s against Yamux's 150-315 MB/s; offering it only invites a
    # slow negotiation result with peers that prefer it.
    return {TProtocol(YAMUX_PROTOCOL_ID): Yamux}


async def _write_chunked(stream: INetStream, header: bytes, data: bytes) -> None:
    """Write header then data in BLOB_CHUNK pieces, each bounded in time (a stalled reader ends it)."""
    view = memoryview(data)
    with trio.fail_after(STREAM_IO_TIMEOUT_S):
        await stream.write(header)
    for offset in range(0, len(data), BLOB_CHUNK):
        with trio.fail_after(STREAM_IO_TIMEOUT_S):
            await stream.write(bytes(view[offset : offset + BLOB_CHUNK]))


def _is_dialable_tcp(addr: multiaddr.Multiaddr) -> bool:
    names = [p.name for p in addr.protocols()]
    return (
        len(names) >= 2
        and names[0] in ("ip4", "ip6")
        and names[1] == "tcp"
        and "p2p-circuit" not in names
    )


def _parse_px_payload(payload: bytes) -> list[tuple[ID, list[multiaddr.Multiaddr]]]:
    """Peers from a peer-exchange answer. Malformed entries are skipped: it is only a hint list."""
    try:
        entries = json.loads(payload.decode("utf-8")).get("peers", [])
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return []
    found = []
    for entry in entries[:PX_MAX_PEERS] if isinstance(entries, list) else []:
        try:
            peer_id = ID.from_base58(entry["id"])
            addrs = [multiaddr.Multiaddr(a) for a in entry["addrs"][:4]]
        except (KeyError, TypeError, ValueError):
            continue
        addrs = [a for a in addrs if _is_dialable_tcp(a)]
        if addrs:
            found.append((peer_id, addrs))
    return found
