"""Every change swarm-node makes to py-libp2p's own behaviour, in one place, pinned to 0.8.1.

Subclasses that override private behaviour, replaced attributes and tuned private fields
all live here; the rest of the package uses only what py-libp2p offers as configuration.
Each piece names the failure it fixes, found on py-libp2p 0.8.1; docs/LIBP2P.md describes
each one, with its measured figures where we have them. They depend on that version's internals, so importing
this module with any other version installed raises `Libp2pVersionError`.
"""

from __future__ import annotations

import contextvars
import importlib.metadata
import logging
import time
import weakref
from collections.abc import Callable
from typing import cast

import trio

from swarm.core.errors import Libp2pVersionError

PATCHED_VERSION = "0.8.1"


def check_libp2p_version() -> None:
    """Raise `Libp2pVersionError` unless the installed py-libp2p is the one patched here."""
    try:
        installed = importlib.metadata.version("libp2p")
    except importlib.metadata.PackageNotFoundError:
        raise Libp2pVersionError(
            f"py-libp2p is not installed; swarm-node needs libp2p=={PATCHED_VERSION}"
        ) from None
    if installed != PATCHED_VERSION:
        raise Libp2pVersionError(
            f"py-libp2p {installed} is installed, but swarm-node's changes to its internals "
            f"were written for {PATCHED_VERSION}: install libp2p=={PATCHED_VERSION}"
        )


check_libp2p_version()  # before importing any of the internals below

import libp2p.network.swarm as libp2p_swarm  # noqa: E402
import libp2p.pubsub.pubsub as libp2p_pubsub  # noqa: E402
import libp2p.stream_muxer.muxer_multistream as libp2p_muxer_multistream  # noqa: E402
from libp2p.abc import IHost, INetStream, INetwork  # noqa: E402
from libp2p.custom_types import MessageID  # noqa: E402
from libp2p.io.exceptions import IOException  # noqa: E402
from libp2p.network.config import RetryConfig  # noqa: E402
from libp2p.network.connection.exceptions import RawConnError  # noqa: E402
from libp2p.network.stream.exceptions import StreamError  # noqa: E402
from libp2p.peer.envelope import consume_envelope  # noqa: E402
from libp2p.peer.id import ID  # noqa: E402
from libp2p.peer.peerstore import env_to_send_in_RPC  # noqa: E402
from libp2p.pubsub.gossipsub import GossipSub  # noqa: E402
from libp2p.pubsub.pb import rpc_pb2  # noqa: E402
from libp2p.pubsub.pubsub import Pubsub  # noqa: E402
from libp2p.pubsub.rpc_queue import RpcQueue  # noqa: E402
from libp2p.pubsub.score import PeerScorer  # noqa: E402
from libp2p.pubsub.utils import maybe_consume_signed_record, safe_bytes_from_hex  # noqa: E402
from libp2p.pubsub.validators import signature_validator  # noqa: E402
from libp2p.stream_muxer.yamux.yamux import DEFAULT_WINDOW_SIZE, MAX_WINDOW_SIZE, Yamux  # noqa: E402

from swarm.p2p.libp2p import pnet  # noqa: E402
from swarm.p2p.libp2p.control_budget import MAX_CONTROL_PER_RPC, ControlBudget  # noqa: E402
from swarm.p2p.libp2p.framing import (  # noqa: E402
    NET_ERRORS,
    STREAM_IO_TIMEOUT_S,
    StreamProtocolError,
    discard_exactly,
    read_exactly,
    read_uvarint,
    reset_quietly,
)
from swarm.p2p.libp2p.inbound import InboundBudget  # noqa: E402
from swarm.p2p.libp2p.peer_costs import Cost  # noqa: E402
from swarm.p2p.libp2p.pulse import Pulse  # noqa: E402
from swarm.p2p.transport import RefusalReason  # noqa: E402

logger = logging.getLogger(__name__)

# Queued RPCs to one peer are sent as one RPC of up to this many bytes (see SwarmPubsub).
RPC_BATCH_BYTES = 512 * 1024
# How long closing one connection may take once its socket is closed.
CONNECTION_CLOSE_S = 3.0

# The peer that handed us a message (not necessarily its origin), for the current pubsub task.
_FORWARDER: contextvars.ContextVar[ID | None] = contextvars.ContextVar("forwarder", default=None)
# The message whose signature this pubsub task has just verified (see SwarmPubsub.push_msg).
# The signer (`from`) of the message whose validation runs now, when another peer relayed it.
_RELAYED_FROM: contextvars.ContextVar[ID | None] = contextvars.ContextVar(
    "relayed_from", default=None
)
_VERIFIED: contextvars.ContextVar[rpc_pb2.Message | None] = contextvars.ContextVar(
    "verified", default=None
)
# An RPC above the inbound limit is read and dropped up to this size; beyond it, the stream
# is reset and the peer's connection closed (it reconnects clean).
OVERSIZE_DISCARD_LIMIT = 64 * 1024 * 1024
# Called with (peer, reason, detail, message or None) for everything refused from a peer.
Refuse = Callable[[ID, RefusalReason, str, "rpc_pb2.Message | None"], None]


class TunedQueues(dict):
    """`Pubsub.peer_queues` replacement: deepens each per-peer RPC queue as pubsub registers it.

    Fixes: each peer's queue holds 32 RPCs and silently drops the rest; a burst of 100
    messages delivered 16. Pubsub builds every queue with the library defaults (32 RPCs,
    1 MiB) and hands the same object to that peer's sending task, so the queue must be
    tuned in place at the moment it is stored, which is this `__setitem__`. Drops and
    RPCs discarded with a dead peer's queue are counted through the callbacks.
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
        # RpcQueue exposes no setter for its depth; `_queue.max_size` is its only knob.
        queue._queue.max_size = self._depth
        queue.max_message_size = self._max_rpc_size
        queue.push = self._counting_push(queue)  # type: ignore[method-assign]  # a patch
        queue.close = self._counting_close(queue)  # type: ignore[method-assign]  # a patch
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


def coalesce(
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
        # RpcQueue has only an async pop; its PriorityQueue pops synchronously.
        following = queue._queue.pop()
        if following is None:
            break
        following_size = following.ByteSize()
        if size + following_size > limit:
            return batch, following
        batch.MergeFrom(following)
        size += following_size
    return batch, None


class BlameScorer(PeerScorer):
    """The library's scorer, with an invalid message held against the peer that signed it.

    The library counts a message our validator refuses against the peer that forwarded it
    (P4). A relay validates what it forwards as far as it can, but it cannot know our state
    (which trainer we follow, which nonces we saw, our rate limits): a trainer relaying
    forged manifests to its follower lost its score there and then had its own messages
    refused. The signature was checked before validation, so the signer is known for sure;
    it is penalised instead, if it is one of our peers (a stranger has no score to lower;
    the relay still pays the handling through its cost budget, `peer_costs`).
    """

    is_peer: Callable[[ID], bool] = staticmethod(lambda peer: False)

    def on_invalid_message(self, peer: ID, topic: str) -> None:
        signer = _RELAYED_FROM.get()
        if signer is None or signer == peer:
            super().on_invalid_message(peer, topic)
        elif self.is_peer(signer):
            super().on_invalid_message(signer, topic)


class SwarmGossipSub(GossipSub):
    """GossipSub with its control messages bounded as GossipSub v1.1 intends, and no
    equivocation record.

    What it changes, and the failure each change fixes:

    - `_check_equivocation`: the library keeps the full body of every recent message
      (trimmed from over 1000 to 500 only at a heartbeat) to spot a reused sequence number:
      up to a gigabyte at 1 MiB per message. The seen-cache already drops a second message
      with a reused number (message IDs are sender + sequence number).
    - `handle_iwant`: the library answers every ID of every IWANT, the same ID as often as
      asked (10 IWANT entries a second, any number of IDs each): one small IWANT repeating
      a cached ID made us send that message thousands of times. Now each ID is answered at
      most 3 times per peer, within a per-peer budget per heartbeat (control_budget.py).
    - `handle_ihave`: the library asks for every unknown ID offered and logs a warning for
      each IHAVE over its rate limit. Now at most 10 IHAVEs and 5000 IDs per peer and
      heartbeat are looked at; the rest is counted and refused without a log line.
    - `handle_graft` / `handle_prune`: GRAFT and PRUNE for topics we are not in are ignored
      (the library answered every such GRAFT with a PRUNE and kept a backoff entry for
      every PRUNEd topic name, unbounded); a GRAFT during backoff is penalised (spec P7)
      and answered with at most one PRUNE per heartbeat.
    - PRUNE peer exchange: the library dialled PX peers at once, inside the read loop of
      the peer that sent them, from any peer (its accept threshold was -inf), and without a
      signed record from the peerstore. Now PX is taken only from peers scoring at least
      peer_scores.ACCEPT_PX_THRESHOLD, only with a valid signed peer record, at most PX_MAX
      per PRUNE, and handed to our dialer (allow-list, peer limit, backoff), never dialled
      here.
    - Peers below the gossip threshold get no answer to IHAVE or IWANT (spec).
    """

    PX_MAX = 8

    budget: ControlBudget
    scorer: PeerScorer  # GossipSub always builds one (default parameters if none given)
    refuse: Refuse | None = None  # set by gossip.Gossip
    learn_peer: Callable[[ID, list], None] | None = None  # set by the transport (Dialer.learn)
    count: Callable[[str, int], None] | None = None  # set by gossip.Gossip

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003 - GossipSub's own
        super().__init__(*args, **kwargs)
        self.budget = ControlBudget()
        self.mesh_grew = Pulse()  # fires whenever a peer joins a topic's mesh
        self.scorer = BlameScorer(self.scorer.params)
        self.scorer.is_peer = lambda peer: self.pubsub is not None and peer in self.pubsub.peers

    def _check_equivocation(self, msg: rpc_pb2.Message) -> bool:
        return True

    def _notify_mesh_peer_added(self, peer_id: ID, topic: str) -> None:
        # Every path that adds a mesh peer (join, GRAFT, heartbeat, opportunistic graft) calls this.
        super()._notify_mesh_peer_added(peer_id, topic)
        self.mesh_grew.fire()

    def gossip_heartbeat(self):  # noqa: ANN201 - the library's own return type
        self.budget.new_heartbeat()  # once per heartbeat, before IHAVEs go out
        return super().gossip_heartbeat()

    def _note(self, peer_id: ID, reason: RefusalReason, detail: str) -> None:
        if self.refuse is not None:
            self.refuse(peer_id, reason, detail, None)

    def _counted(self, name: str, amount: int) -> None:
        if self.count is not None and amount:
            self.count(name, amount)

    def _below(self, peer_id: ID, threshold: float) -> bool:
        return self.scorer.score(peer_id, list(self.mesh)) < threshold

    async def handle_rpc(self, rpc: rpc_pb2.RPC, sender_peer_id: ID) -> None:
        """The control part of an RPC, bounded as a whole before any entry is looked at.

        The library's own version checks the sender's signed record a second time (Pubsub
        did) and hands every entry to its handler, however many there are.
        """
        control = rpc.control
        kinds = (control.ihave, control.iwant, control.graft, control.prune, control.idontwant)
        entries = sum(len(kind) for kind in kinds)
        ids = 0
        if entries <= MAX_CONTROL_PER_RPC:
            ids = sum(len(e.messageIDs) for e in control.ihave)
            ids += sum(len(e.messageIDs) for e in control.iwant)
        refused = self.budget.admit_control(sender_peer_id, entries, ids)
        if refused is not None:
            self._counted("control_refused", entries)
            self._counted(
                "ihave_ignored", sum(len(e.messageIDs) for e in control.ihave[:MAX_CONTROL_PER_RPC])
            )
            self._note(sender_peer_id, RefusalReason.CONTROL_FLOOD, refused)
            return
        for ihave in control.ihave:
            await self.handle_ihave(ihave, sender_peer_id)
        for iwant in control.iwant:
            await self.handle_iwant(iwant, sender_peer_id)
        for graft in control.graft:
            await self.handle_graft(graft, sender_peer_id)
        for prune in control.prune:
            await self.handle_prune(prune, sender_peer_id)
        # IDONTWANT is GossipSub v1.2, which we do not speak: counted above, otherwise ignored.

    async def handle_ihave(self, ihave_msg: rpc_pb2.ControlIHave, sender_peer_id: ID) -> None:
        ids = ihave_msg.messageIDs
        if ihave_msg.topicID not in self.mesh:
            self._counted("ihave_ignored", len(ids))
            self._note(
                sender_peer_id, RefusalReason.CONTROL_FLOOD, "IHAVE for a topic we are not in"
            )
            return
        if self._below(sender_peer_id, self.scorer.params.gossip_threshold):
            self._counted("ihave_ignored", len(ids))
            return
        allowed = self.budget.admit_ihave(sender_peer_id, len(ids))
        if allowed < len(ids):
            self._counted("ihave_ignored", len(ids) - allowed)
            self._note(
                sender_peer_id,
                RefusalReason.CONTROL_FLOOD,
                f"IHAVE over budget: {len(ids) - allowed} of {len(ids)} IDs ignored",
            )
        if self.pubsub is None:  # not attached yet: nothing to ask for
            return
        seen = self.pubsub.seen_messages
        wanted = [
            MessageID(mid)
            for mid in (safe_bytes_from_hex(raw) for raw in ids[:allowed])
            if mid is not None and not seen.has(mid)
        ]
        if wanted:
            await self.emit_iwant(wanted, sender_peer_id)

    async def handle_iwant(self, iwant_msg: rpc_pb2.ControlIWant, sender_peer_id: ID) -> None:
        ids = list(dict.fromkeys(iwant_msg.messageIDs))  # each ID once per request
        refused = len(iwant_msg.messageIDs) - len(ids)
        if self._below(sender_peer_id, self.scorer.params.gossip_threshold):
            refused, ids = refused + len(ids), []
        answers, nbytes = [], 0
        for raw in ids:
            mid = safe_bytes_from_hex(raw)
            msg = self.mcache.get(mid) if mid is not None else None
            if mid is None or msg is None:
                continue
            size = msg.ByteSize()
            if self.budget.admit_iwant(sender_peer_id, mid, size):
                answers.append(msg)
                nbytes += size
            else:
                refused += 1
        if refused:
            self._counted("iwant_refused", refused)
            self._note(
                sender_peer_id,
                RefusalReason.CONTROL_FLOOD,
                f"IWANT over budget: {refused} IDs not answered",
            )
        if answers and self.pubsub is not None:
            packet = rpc_pb2.RPC(publish=answers)
            packet.senderRecord, _ = env_to_send_in_RPC(self.pubsub.host)
            self.send_rpc(sender_peer_id, packet)
            self._counted("iwant_served_bytes", nbytes)

    async def handle_graft(self, graft_msg: rpc_pb2.ControlGraft, sender_peer_id: ID) -> None:
        topic = graft_msg.topicID
        if topic not in self.mesh:
            self._note(
                sender_peer_id, RefusalReason.CONTROL_FLOOD, "GRAFT for a topic we are not in"
            )
            return
        if sender_peer_id in self.direct_peers or self.scorer.is_graylisted(
            sender_peer_id, [topic]
        ):
            if self.budget.admit_prune_reply(sender_peer_id, topic):
                await self.emit_prune(topic, sender_peer_id, False, False)
            return
        if self._check_back_off(sender_peer_id, topic):
            self._note(sender_peer_id, RefusalReason.BACKOFF_VIOLATION, f"GRAFT on {topic!r}")
            self._add_back_off(sender_peer_id, topic, False)
            if self.budget.admit_prune_reply(sender_peer_id, topic):
                await self.emit_prune(topic, sender_peer_id, False, False)
            return
        if sender_peer_id not in self.mesh[topic]:
            self.mesh[topic].add(sender_peer_id)
            self._notify_mesh_peer_added(sender_peer_id, topic)
            self.scorer.on_join_mesh(sender_peer_id, topic)

    async def handle_prune(self, prune_msg: rpc_pb2.ControlPrune, sender_peer_id: ID) -> None:
        topic = prune_msg.topicID
        if topic not in self.mesh:
            self._note(
                sender_peer_id, RefusalReason.CONTROL_FLOOD, "PRUNE for a topic we are not in"
            )
            return
        self._add_back_off(sender_peer_id, topic, False, max(0, prune_msg.backoff))
        self.mesh[topic].discard(sender_peer_id)
        self.scorer.on_leave_mesh(sender_peer_id, topic)
        if prune_msg.peers:
            self._accept_px(sender_peer_id, topic, list(prune_msg.peers))

    def _accept_px(self, sender_peer_id: ID, topic: str, entries: list) -> None:
        if not self.scorer.allow_px_from(sender_peer_id, [topic]) or self.learn_peer is None:
            self._counted("px_ignored", len(entries))
            return
        ignored = max(0, len(entries) - self.PX_MAX)
        for entry in entries[: self.PX_MAX]:
            try:
                _, record = consume_envelope(entry.signedPeerRecord, "libp2p-peer-record")
                if not entry.signedPeerRecord or record.peer_id != ID(entry.peerID):
                    raise ValueError("PX entry without a matching signed peer record")
            except Exception:  # noqa: BLE001 - a peer's bad record is skipped and counted
                ignored += 1
                continue
            self.learn_peer(record.peer_id, list(record.addrs))
        self._counted("px_ignored", ignored)

    async def _do_px(self, px_peers: list[rpc_pb2.PeerInfo]) -> None:
        """Never dial PX peers from here (see `_accept_px`)."""
        self._counted("px_ignored", len(px_peers))


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
                relayed = _RELAYED_FROM.set(ID(msg.from_id) if msg.from_id else None)
            await super().push_msg(msg_forwarder, msg)
        except Exception as exc:  # noqa: BLE001 - a bad message is dropped, never fatal
            if msg_forwarder == self.my_id:
                raise  # our own publish: the publisher task counts it
            self._on_peer_error("message", exc)
        finally:
            if verified is not None:
                _VERIFIED.reset(verified)
            if relayed is not None:
                _RELAYED_FROM.reset(relayed)
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


def keep_observed_ips(host: object, recorder: object) -> None:
    """Record Identify's observed addresses into `recorder` (`holepunch.ObservedIps`)
    without advertising them.

    The host has an observed-address manager only with Identify's address discovery on,
    and then adds its confirmed addresses to those it advertises: the observed port of an
    outbound connection is an ephemeral one nobody listens on (pitfall 13). Hole punching
    needs only the outside IP. The host calls the manager's `record_observation`,
    `remove_conn`, `addrs` and `get_nat_type`; the recorder's `addrs()` is always empty.
    """
    host._observed_addr_manager = recorder  # type: ignore[attr-defined]  # a patch


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


def guard_relay_streams(
    host: IHost, protocol: object, *, hop: bool, admit: Callable[[ID], bool]
) -> None:
    """Put `admit(peer)` (bill the stream, check the allow-list and bans) in front of the
    circuit relay's stream handlers: hop (a relay's, only with `hop`) and stop.

    Fixes: `CircuitV2Protocol.run` registers its own handlers, so a peer's reservation and
    circuit requests cost it nothing in its budget (`peer_costs`), and a peer banned while
    its connection lives still reached them. A stream `admit` refuses is reset unread.
    """
    from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID, STOP_PROTOCOL_ID

    def guarded(handler: Callable) -> Callable:
        async def handle(stream: INetStream) -> None:
            if admit(stream.muxed_conn.peer_id):
                await handler(stream)
                return
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                try:
                    await stream.reset()
                except (*NET_ERRORS, trio.ClosedResourceError):
                    pass

        return handle

    if hop:
        host.set_stream_handler(PROTOCOL_ID, guarded(protocol._handle_hop_stream))  # type: ignore[attr-defined]
    host.set_stream_handler(STOP_PROTOCOL_ID, guarded(protocol._handle_stop_stream))  # type: ignore[attr-defined]


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


def ignore_flow_control(stream: INetStream) -> None:
    """For adversary tests only: let `stream` write past the receiver's Yamux window.

    An honest muxer stops at the window the receiver granted; a hostile one does not.
    Yamux streams keep what they may still send in `send_window` (there is no setter).
    """
    muxed = getattr(stream, "muxed_stream", stream)
    if hasattr(muxed, "send_window"):
        muxed.send_window = 1 << 40


# A stream may hold this much beyond the receive window it granted before the peer is cut off.
FLOW_SLACK = 64 * 1024


class _BoundedBuffer(bytearray):
    """One Yamux stream's receive buffer, refusing bytes beyond the window the peer was given."""

    def __init__(self, conn: SwarmYamux, stream_id: int) -> None:
        super().__init__()
        self._conn = conn
        self._stream_id = stream_id

    def extend(self, data) -> None:  # noqa: ANN001 - bytes-like, as bytearray.extend takes
        limit = self._conn.buffer_limit(self._stream_id)
        if len(self) + len(data) > limit:
            self._conn.flow_control_violated(len(self) + len(data), limit)
            return
        super().extend(data)


class _BoundedBuffers(dict):
    """`Yamux.stream_buffers` replacement: every buffer stored in it is a `_BoundedBuffer`."""

    def __init__(self, conn: SwarmYamux) -> None:
        super().__init__()
        self._conn = conn

    def __setitem__(self, stream_id: int, value: bytearray) -> None:
        buffer = _BoundedBuffer(self._conn, stream_id)
        bytearray.extend(buffer, value)
        super().__setitem__(stream_id, buffer)


class SwarmYamux(Yamux):
    """Yamux that cuts off a peer writing past the receive window it was granted.

    Fixes: the library logs "peer exceeded receive window" and buffers the bytes anyway,
    without limit. A blob fetcher that kept writing while our handler was busy sending
    made the server buffer +1.0 GB. Now a stream's buffer holds at most its window plus
    FLOW_SLACK; beyond that the bytes are dropped and `on_flow_violation(peer)` is called
    once per connection (the transport counts it and closes the connection).
    py-libp2p's muxer negotiation constructs `Yamux` by its module-level name whatever
    class the host was given, so `use_bounded_yamux` replaces that name; the callback is
    looked up by the connection's local peer ID (one per transport in this process).
    """

    def __init__(self, secured_conn, peer_id: ID, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        super().__init__(secured_conn, peer_id, *args, **kwargs)
        self.stream_buffers = _BoundedBuffers(self)
        self._violated = False
        handler = _FLOW_HANDLERS.get(secured_conn.get_local_peer())
        self.on_flow_violation = handler() if handler is not None else None

    def buffer_limit(self, stream_id: int) -> int:
        stream = self.streams.get(stream_id)
        window = stream.target_recv_window if stream is not None else MAX_WINDOW_SIZE
        return max(window, DEFAULT_WINDOW_SIZE) + FLOW_SLACK

    def flow_control_violated(self, buffered: int, limit: int) -> None:
        if self._violated:
            return
        self._violated = True
        logger.warning(
            "peer %s wrote past its flow-control window (%d > %d bytes); closing",
            self.peer_id,
            buffered,
            limit,
        )
        if self.on_flow_violation is not None:
            self.on_flow_violation(self.peer_id)


# local peer ID -> weak reference to the transport method told about flow-control violations
_FLOW_HANDLERS: dict[ID, weakref.WeakMethod] = {}


def use_bounded_yamux(local_id: ID, on_flow_violation: Callable[[ID], None]) -> None:
    """Make every Yamux connection a `SwarmYamux`; tell `on_flow_violation` about `local_id`'s."""
    _FLOW_HANDLERS[local_id] = weakref.WeakMethod(on_flow_violation)
    libp2p_muxer_multistream.Yamux = SwarmYamux  # type: ignore[misc]  # a patch


class _ProtocolNotSupportedFilter(logging.Filter):
    """Drops basic_host's error report of a stream refused with "protocol not supported"."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("Failed to open stream") and "not supported" in message)


def quiet_protocol_not_supported() -> None:
    """Stop logging a peer's "protocol not supported" answer as a 7-line error.

    Fixes: `BasicHost.new_stream` logs every failed negotiation at ERROR level over seven
    lines, then raises. A peer that does not speak one of our protocols (any other libp2p
    implementation and our own peer exchange, say) is normal; the caller that asked
    decides what to say. Other failures to open a stream are still logged.
    """
    host_logger = logging.getLogger("libp2p.host.basic_host")
    if not any(isinstance(f, _ProtocolNotSupportedFilter) for f in host_logger.filters):
        host_logger.addFilter(_ProtocolNotSupportedFilter())


def is_protocol_not_supported(exc: BaseException) -> bool:
    """Whether a failed stream open means "the peer does not speak that protocol"."""
    seen: BaseException | None = exc
    while seen is not None:
        if "not supported" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
