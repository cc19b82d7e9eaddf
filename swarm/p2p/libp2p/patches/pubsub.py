"""Pubsub's changes: `SwarmPubsub` (deep outbound queues, batched sends, direct delivery,
hardened input), and the signature check it does not repeat.
"""

from __future__ import annotations

import contextvars
import logging
import time
import weakref
from collections.abc import Callable
from typing import cast

import libp2p.pubsub.pubsub as libp2p_pubsub
import trio
from libp2p.abc import IHost, INetStream
from libp2p.io.exceptions import IOException
from libp2p.network.connection.exceptions import RawConnError
from libp2p.network.stream.exceptions import StreamError
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.pubsub.rpc_queue import RpcQueue
from libp2p.pubsub.utils import maybe_consume_signed_record
from libp2p.pubsub.validators import signature_validator

from swarm.p2p.libp2p.framing import (
    STREAM_IO_TIMEOUT_S,
    StreamProtocolError,
    discard_exactly,
    read_exactly,
    read_uvarint,
    reset_quietly,
)
from swarm.p2p.libp2p.inbound import InboundBudget
from swarm.p2p.libp2p.patches.gossipsub import RELAYED_FROM, Refuse, SwarmGossipSub
from swarm.p2p.libp2p.patches.network import abort_peer_connections
from swarm.p2p.libp2p.patches.rpc_queues import RPC_BATCH_BYTES, TunedQueues, coalesce
from swarm.p2p.libp2p.peer_costs import Cost
from swarm.p2p.libp2p.pulse import Pulse
from swarm.p2p.transport import RefusalReason

logger = logging.getLogger(__name__)

# The peer that handed us a message (not necessarily its origin), for the current pubsub task.
_FORWARDER: contextvars.ContextVar[ID | None] = contextvars.ContextVar("forwarder", default=None)
# The message whose signature this pubsub task has just verified (see SwarmPubsub.push_msg).
_VERIFIED: contextvars.ContextVar[rpc_pb2.Message | None] = contextvars.ContextVar(
    "verified", default=None
)
# An RPC above the inbound limit is read and dropped up to this size; beyond it, the stream
# is reset and the peer's connection closed (it reconnects clean).
OVERSIZE_DISCARD_LIMIT = 64 * 1024 * 1024


class SwarmPubsub(Pubsub):
    """Pubsub with deep outbound queues, batched sends, direct delivery and hardened input.

    What it changes in the library's Pubsub, and the failure each change fixes:

    - `notify_subscriptions`: the library puts each validated message into a 32-slot
      channel and drops it, silently, when full; here it goes to `deliver` (our bounded,
      counting inbox). `push_msg` records which peer forwarded the message, for it.
    - `handle_sending_messages` sends whatever has queued up for a peer as one RPC. The
      library writes one RPC per message; each write costs a muxer frame, an encryption,
      a syscall and, at the receiver, a read, a decryption, a parse and a signed-record
      check (about 1 ms of CPU per message copy at the two ends).
    - `write_msg` holds a per-stream lock. The library writes to a peer's stream from
      several tasks (the send loop, the pending-message flush, the recent-message replay)
      and Yamux interleaves the 64 KiB frames of concurrent writes, which corrupts the
      stream; the receiver then fails to parse it.
    - `stream_handler` and `push_msg` contain any error caused by a peer's bytes. In the
      library an unparsable RPC, or any error in a per-message task, escapes into the
      swarm's task group and stops the whole host.
    - A peer whose stream fails gets its *connection* closed. The library only drops the
      stream and with it the peer's subscriptions, which the peer never re-announces on the
      connection it still has, so it would be cut off from our messages for good.
    - Sequence numbers start from the wall clock in nanoseconds. The library seeds them
      with seconds, so a node restarted within seconds under the same identity reuses
      numbers its peers still hold as seen (for 120 s) and its messages are dropped.
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
        refuse: Refuse,
        charge: Callable[[ID, Cost, float], object],
        graylisted: Callable[[ID], bool],
        queue_depth: int,
        max_rpc_size: int,
        max_message_size: int,
        inbound_rpc_limit: int,
    ) -> None:
        super().__init__(host, router, strict_signing=True, max_inbound_rpc_size=inbound_rpc_limit)
        self._deliver = deliver
        self._on_peer_error = on_peer_error
        self._refuse = refuse
        self._charge = charge
        self._graylisted = graylisted
        self.max_message_size = max_message_size
        self.inbound = InboundBudget()
        self.peer_queues = TunedQueues(queue_depth, max_rpc_size, on_queue_drop, on_queue_discard)
        self._write_locks: weakref.WeakKeyDictionary[INetStream, trio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        # peer -> trio time its send loop last made progress (started, or finished a write)
        self.send_progress: dict[ID, float] = {}
        self.sent = Pulse()  # fires when a send loop writes a batch or ends
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
                batch, carry = coalesce(first, queue, min(RPC_BATCH_BYTES, queue.max_message_size))
                ok = await self.write_msg(stream, batch)
                self.sent.fire()
                if not ok:
                    return
        except Exception as exc:  # noqa: BLE001 - as in the library: a failed send loop = dead peer
            self._on_peer_error("send", exc)
            await self._drop_peer(peer_id)
        finally:
            self.sent.fire()  # its queue no longer holds anyone back

    async def stream_handler(self, stream: INetStream) -> None:
        peer_id = stream.muxed_conn.peer_id
        try:
            await super().stream_handler(stream)
        except Exception as exc:  # noqa: BLE001 - a peer's bytes must never stop the host
            self._on_peer_error("receive", exc)
            await reset_quietly(stream)
            await self._drop_peer(peer_id)

    async def push_msg(self, msg_forwarder: ID, msg: rpc_pb2.Message) -> None:
        token = _FORWARDER.set(msg_forwarder)
        verified = relayed = None
        try:
            if msg_forwarder != self.my_id and not self._is_msg_seen(msg):
                # The library drops these two without a trace: a message from a peer
                # scored under the publish threshold, and one whose signature fails.
                scorer = getattr(self.router, "scorer", None)
                if scorer is not None and not scorer.allow_publish(
                    msg_forwarder, list(msg.topicIDs)
                ):
                    self._refuse(
                        msg_forwarder,
                        RefusalReason.LOW_SCORE,
                        "score under the publish threshold",
                        msg,
                    )
                    return
                if not signature_validator(msg):
                    self._refuse(msg_forwarder, RefusalReason.BAD_SIGNATURE, "signature fails", msg)
                    return
                verified = _VERIFIED.set(msg)
                relayed = RELAYED_FROM.set(ID(msg.from_id) if msg.from_id else None)
            await super().push_msg(msg_forwarder, msg)
        except Exception as exc:  # noqa: BLE001 - a bad message is dropped, never fatal
            if msg_forwarder == self.my_id:
                raise  # our own publish: the publisher task counts it
            self._on_peer_error("message", exc)
        finally:
            if verified is not None:
                _VERIFIED.reset(verified)
            if relayed is not None:
                RELAYED_FROM.reset(relayed)
            _FORWARDER.reset(token)

    async def continuously_read_stream(self, stream: INetStream) -> None:
        """The library's read loop, refusing oversize input per message instead of per peer.

        Fixes: an RPC above the inbound limit made the library reset the stream and forget
        the peer's subscriptions while the connection stayed up, so that peer was cut off
        in both directions without a trace; unsigned messages vanished without a record;
        and every received message became a task of its own, without limit.
        """
        peer_id = stream.muxed_conn.peer_id
        try:
            while self.manager.is_running:
                size = await read_uvarint(stream)
                if size is None:
                    return  # the peer closed its stream between RPCs
                self._charge(peer_id, Cost.RPC, 1.0)
                self._charge(peer_id, Cost.RPC_MIB, size / (1 << 20))
                if self._graylisted(peer_id):
                    await self._skip_rpc(stream, peer_id, size, RefusalReason.OVER_BUDGET)
                    continue
                if self._score_graylisted(peer_id):
                    await self._skip_rpc(stream, peer_id, size, RefusalReason.CONTROL_FLOOD)
                    continue
                if size > self.max_inbound_rpc_size:
                    await self._skip_oversize_rpc(stream, peer_id, size)
                    continue
                rpc = rpc_pb2.RPC()
                rpc.ParseFromString(await read_exactly(stream, size))
                self._charge_contents(peer_id, rpc)
                await self._handle_inbound_rpc(peer_id, rpc)
        except (StreamError, IOException, RawConnError) as exc:
            # As in the library: the stream or connection closed under us; nothing to count.
            logger.debug("pubsub stream from %s ended: %s", peer_id, exc)

    def _charge_contents(self, peer_id: ID, rpc: rpc_pb2.RPC) -> None:
        """Bill the peer for each message and control entry of a parsed RPC."""
        if rpc.publish:
            self._charge(peer_id, Cost.MESSAGE, float(len(rpc.publish)))
        if rpc.HasField("control"):
            c = rpc.control
            entries = len(c.ihave) + len(c.iwant) + len(c.graft) + len(c.prune) + len(c.idontwant)
            self._charge(peer_id, Cost.CONTROL, float(entries))

    def _score_graylisted(self, peer_id: ID) -> bool:
        scorer = cast(SwarmGossipSub, self.router).scorer
        return scorer.score(peer_id, list(self.topic_ids)) < scorer.params.graylist_threshold

    async def _skip_rpc(
        self, stream: INetStream, peer_id: ID, size: int, reason: RefusalReason
    ) -> None:
        """Read an RPC of a graylisted peer (past its cost budget, or scored under the
        graylist threshold) past, unparsed; refused, and billed like any refusal."""
        why = "over its cost budget" if reason is RefusalReason.OVER_BUDGET else "graylisted"
        detail = f"RPC of {size} bytes dropped unparsed: {why}"
        self._charge(peer_id, Cost.SKIPPED_RPC, 1.0)
        self._refuse(peer_id, reason, detail, None)
        if size > OVERSIZE_DISCARD_LIMIT:
            raise StreamProtocolError(detail)  # stream_handler resets and reconnects
        with trio.fail_after(STREAM_IO_TIMEOUT_S + size / 1_000_000):
            await discard_exactly(stream, size)

    async def _skip_oversize_rpc(self, stream: INetStream, peer_id: ID, size: int) -> None:
        detail = f"RPC of {size} bytes, limit {self.max_inbound_rpc_size}"
        self._refuse(peer_id, RefusalReason.OVERSIZE, detail, None)
        if size > OVERSIZE_DISCARD_LIMIT:
            raise StreamProtocolError(detail)  # stream_handler resets and reconnects
        with trio.fail_after(STREAM_IO_TIMEOUT_S + size / 1_000_000):
            await discard_exactly(stream, size)

    async def _handle_inbound_rpc(self, peer_id: ID, rpc: rpc_pb2.RPC) -> None:
        if not maybe_consume_signed_record(rpc, self.host, peer_id):
            self._on_peer_error("signed_record", ValueError("invalid signed peer record"))
            return
        for msg in rpc.publish:
            if self._is_subscribed_to_msg(msg) and self._admissible(peer_id, msg):
                nbytes = msg.ByteSize()
                await self.inbound.acquire(peer_id, nbytes)
                self.manager.run_task(self._push_and_release, peer_id, msg, nbytes)
        if rpc.subscriptions:
            if len(rpc.subscriptions) > self.max_subscriptions_per_rpc:
                self._on_peer_error("subscriptions", ValueError("too many subscriptions"))
            else:
                for subscription in rpc.subscriptions:
                    self.handle_subscription(peer_id, subscription)
        if rpc.HasField("control"):
            await self.router.handle_rpc(rpc, peer_id)

    def _admissible(self, peer_id: ID, msg: rpc_pb2.Message) -> bool:
        if len(msg.data) > self.max_message_size:
            detail = f"message of {len(msg.data)} bytes, limit {self.max_message_size}"
            self._refuse(peer_id, RefusalReason.OVERSIZE, detail, msg)
            return False
        if not msg.signature:
            self._refuse(peer_id, RefusalReason.UNSIGNED, "no signature", msg)
            return False
        return True

    async def _push_and_release(self, peer_id: ID, msg: rpc_pb2.Message, nbytes: int) -> None:
        try:
            await self.push_msg(peer_id, msg)
        finally:
            self.inbound.release(peer_id, nbytes)

    async def _drop_peer(self, peer_id: ID) -> None:
        """Forget the peer and close its connection, so that a reconnect starts clean."""
        self._handle_dead_peer(peer_id)
        await abort_peer_connections(self.host.get_network(), peer_id)


def _verified_or_check(msg: rpc_pb2.Message) -> bool:
    """`signature_validator`, except for the message this task has just verified itself."""
    return _VERIFIED.get() is msg or signature_validator(msg)


# SwarmPubsub.push_msg verifies each message's signature before the library does, to record
# failures; the library's own check then skips that one message instead of verifying it twice
# (about 95 us per message). Pubsub calls the module-level name.
libp2p_pubsub.signature_validator = _verified_or_check
