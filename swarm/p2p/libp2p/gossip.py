"""Gossip: GossipSub and Pubsub tuned for bursty RL traffic, validators, delivery, queue watchdog.

Runs on the trio thread. What is tuned, against py-libp2p 0.8.1's defaults (docs/LIBP2P.md):

- Heartbeat 1 s (default 120 s); the built-in spam protection (10 messages/s per topic per
  forwarder, dropped silently), eclipse protection (wants 3 distinct IPs) and adaptive
  gossip (which stretches the heartbeat to 30-60 s when it judges the network unhealthy)
  are off. Rate limits belong to the node.
- GossipSub v1.1 only (v1.0 as fallback); per-peer outbound queues of OUTBOUND_QUEUE_DEPTH
  RPCs (default 32, full means silent drop), through patches.SwarmPubsub.
- One maximum message size on every node (MAX_MESSAGE_SIZE of payload, plus RPC_OVERHEAD).
- Accepted messages go straight into the node's bounded inbox (the library's 32-slot
  subscription channel is bypassed); validators are wrapped with `run_validator`, so one
  that raises rejects the message instead of killing the host, and a rejection also stops
  the message from being forwarded. Rejections are counted by reason.
- A peer whose outbound queue has not moved for SEND_STALL_S has its connection torn down
  (send_queues.py, which back-pressure also reads).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11
from libp2p.pubsub.pb import rpc_pb2
from libp2p.tools.anyio_service import background_trio_service

from swarm.p2p.libp2p.host import AccessPolicy
from swarm.p2p.libp2p.patches import SwarmGossipSub, SwarmPubsub, abort_peer_connections
from swarm.p2p.libp2p.peer_costs import Ban, Cost
from swarm.p2p.libp2p.peer_scores import PENALTY, build_score_params
from swarm.p2p.libp2p.refusals import RefusalRecorder
from swarm.p2p.libp2p.send_queues import SendQueues
from swarm.p2p.libp2p.stats import Counters
from swarm.p2p.transport import (
    BoundedInbox,
    InboundMessage,
    RefusalReason,
    Validator,
    run_validator,
)

logger = logging.getLogger(__name__)

# --- Wire constants: identical on every node, or nodes cannot talk. ---
MAX_MESSAGE_SIZE = 1024 * 1024  # largest gossip payload publish() accepts
# A payload travels inside an RPC with topic, seqno, signature, public key and the sender's
# signed peer record; this much headroom covers all of it.
RPC_OVERHEAD = 64 * 1024
# The largest RPC read from a peer. Larger than ours on purpose: js-libp2p allows 4 MiB, and
# a message above our MAX_MESSAGE_SIZE inside such an RPC is refused on its own (counted,
# recorded as oversize) while the rest of the RPC is processed. Larger RPCs are read and
# dropped (patches.OVERSIZE_DISCARD_LIMIT bounds even that).
INBOUND_RPC_LIMIT = 4 * 1024 * 1024 + RPC_OVERHEAD
# Only GossipSub v1.1 (with v1.0 as fallback): v1.2 adds an IDONTWANT control RPC per
# published message to every mesh peer, which doubles queue pressure on bursts and, with
# the library's 10-entry IDONTWANT memory, saves nothing on our message rates.
GOSSIP_PROTOCOLS = (PROTOCOL_ID_V11, PROTOCOL_ID)

# --- Tuning; none of these need to match across nodes. ---
# Mesh degree D (the GossipSub spec's default): each node forwards every message to about D
# peers, so a network carries about N*D copies of each message to deliver it to N-1 nodes,
# and each copy costs py-libp2p on the order of a millisecond of CPU at both ends. A lower
# D (a constructor option) saves CPU on small machines at the cost of redundancy.
DEFAULT_MESH_DEGREE = 6
HEARTBEAT_INTERVAL_S = 1
OUTBOUND_QUEUE_DEPTH = 4096  # RPCs per peer; library default 32


@dataclass(frozen=True)
class Libp2pInboundMessage(InboundMessage):
    """An `InboundMessage` that also names the peer which forwarded it to us (for latency stats)."""

    forwarder: str = ""


def build_gossipsub(mesh_degree: int) -> SwarmGossipSub:
    """GossipSub with degree D, D_lo = D*2//3, D_hi = 2*D, scoring on, the defaults above changed."""
    return SwarmGossipSub(
        protocols=list(GOSSIP_PROTOCOLS),
        degree=mesh_degree,
        degree_low=max(1, mesh_degree * 2 // 3),
        degree_high=2 * mesh_degree,
        heartbeat_interval=HEARTBEAT_INTERVAL_S,
        heartbeat_initial_delay=0.1,
        spam_protection_enabled=False,
        eclipse_protection_enabled=False,
        adaptive_gossip_enabled=False,
        score_params=build_score_params(),
    )


class Gossip:
    """The pubsub side of one host: subscriptions, validation, delivery and queue health.

    Constructing it registers the pubsub stream handlers on the host; `running()` starts
    the services, which must happen before the host listens (a pubsub stream arriving
    before Pubsub's service manager exists kills the host).
    """

    def __init__(
        self,
        host: IHost,
        policy: AccessPolicy,
        counters: Counters,
        inbox: BoundedInbox,
        rejections: RefusalRecorder,
        *,
        mesh_degree: int,
        max_message_size: int,
    ) -> None:
        self._host = host
        self._policy = policy
        self._counters = counters
        self._inbox = inbox
        self._rejections = rejections
        self._subscribed: set[str] = set()
        self.gossipsub = build_gossipsub(mesh_degree)
        self.pubsub = SwarmPubsub(
            host,
            self.gossipsub,
            deliver=self._deliver,
            on_queue_drop=self._count_queue_drop,
            on_queue_discard=self._count_queue_discard,
            on_peer_error=self._count_peer_error,
            refuse=self.refuse,
            charge=policy.charge,
            graylisted=policy.graylisted,
            queue_depth=OUTBOUND_QUEUE_DEPTH,
            max_rpc_size=max_message_size + RPC_OVERHEAD,
            max_message_size=max_message_size,
            inbound_rpc_limit=INBOUND_RPC_LIMIT,
        )
        self.queues = SendQueues(host, self.pubsub, counters, rejections)
        self.gossipsub.refuse = self.refuse
        self.gossipsub.count = self._count
        policy.on_ban = self.ban

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Pubsub and GossipSub services, ready for subscriptions, for the `async with` block."""
        async with background_trio_service(self.pubsub), background_trio_service(self.gossipsub):
            await self.pubsub.wait_until_ready()
            yield

    # ------------------------------------------------------------------ subscriptions

    async def subscribe(self, topic: str, validator: Validator | None) -> None:
        # The validator goes in first, so no message on the topic is ever accepted unchecked.
        self.pubsub.set_topic_validator(topic, self._gossip_validator(topic, validator), False)
        if topic not in self._subscribed:
            await self.pubsub.subscribe(topic)
            self._subscribed.add(topic)

    def _gossip_validator(
        self, topic: str, validator: Validator | None
    ) -> Callable[[ID, rpc_pb2.Message], bool]:
        """The libp2p-side validator: runs ours so that it can never raise, and counts rejections.

        Returning False here makes GossipSub drop the message *and not forward it*.
        """
        my_id_bytes = self._policy.my_id.to_bytes()
        policy = self._policy

        def gossip_validator(forwarder: ID, msg: rpc_pb2.Message) -> bool:
            if msg.from_id == my_id_bytes:
                return True  # our own publish: our peers validate it, as with MemoryTransport
            source = policy.peer_str(msg.from_id)
            with self._counters.locked() as stats:
                stats.gossip_bytes_in += len(msg.data)
            if not (policy.allows(forwarder) and policy.allows_str(source)):
                reason: str | None = "peer_not_allowed"
            else:
                message = InboundMessage(
                    topic=topic, data=bytes(msg.data), source=source, received_at=time.time()
                )
                reason = run_validator(validator, message)
            if reason is None:
                return True
            with self._counters.locked() as stats:
                stats.rejected[str(reason)] += 1
            self._charge_refused(forwarder, source)
            return False

        return gossip_validator

    def _charge_refused(self, forwarder: ID, source: str) -> None:
        """A message the validator refused costs its signer the refusal; a relay that is not
        its signer pays only for handling it (it validated as far as it could)."""
        policy = self._policy
        if source == policy.peer_str(forwarder.to_bytes()):
            policy.charge(forwarder, Cost.REFUSAL)
        else:
            policy.charge(source, Cost.REFUSAL)
            policy.charge(forwarder, Cost.RELAYED_REFUSAL)

    def _deliver(self, msg: rpc_pb2.Message, forwarder: ID | None) -> None:
        """Called by pubsub for every accepted message: straight into the inbox, counted."""
        if msg.from_id == self._policy.my_id.to_bytes():
            return  # libp2p hands a subscribed publisher its own message; the contract does not
        source = self._policy.peer_str(msg.from_id)
        forwarded_by = self._policy.peer_str(forwarder.to_bytes()) if forwarder is not None else ""
        now = time.time()
        data = bytes(msg.data)
        for topic in msg.topicIDs:
            if topic not in self._subscribed:
                continue
            with self._counters.locked() as stats:
                stats.received += 1
            self._inbox.put(
                Libp2pInboundMessage(
                    topic=topic, data=data, source=source, received_at=now, forwarder=forwarded_by
                )
            )

    async def publish(self, topic: str, data: bytes) -> None:
        await self.pubsub.publish(topic, data)

    # ------------------------------------------------------------------ mesh

    def score(self, peer_id: ID) -> float:
        """The peer's GossipSub score over our subscribed topics."""
        return self.gossipsub.scorer.score(peer_id, sorted(self._subscribed))

    def mesh_size(self, topic: str) -> int:
        return len(self.gossipsub.mesh.get(topic, ()))

    async def wait_for_topic_peers(self, topic: str, count: int, timeout: float) -> int:
        """Until `count` peers are in the topic's mesh (woken by each join), at most `timeout`."""
        deadline = trio.current_time() + timeout
        while self.mesh_size(topic) < count and trio.current_time() < deadline:
            await self.gossipsub.mesh_grew.wait(deadline - trio.current_time())
        return self.mesh_size(topic)

    # ------------------------------------------------------------------ refusals

    def refuse(
        self,
        peer_id: ID,
        reason: RefusalReason,
        detail: str,
        msg: rpc_pb2.Message | None = None,
    ) -> None:
        """Something from `peer_id` was refused: count it, report it, lower the peer's score."""
        topics = list(msg.topicIDs) if msg is not None else []
        self._rejections.note(
            self._policy.peer_str(peer_id.to_bytes()),
            reason,
            detail,
            source=self._policy.peer_str(msg.from_id) if msg is not None and msg.from_id else "",
            topic=topics[0] if topics else "",
        )
        scorer = self.gossipsub.scorer
        if reason in (RefusalReason.UNSIGNED, RefusalReason.BAD_SIGNATURE):
            for topic in topics:
                scorer.on_invalid_message(peer_id, topic)  # P4, as for invalid messages
        else:
            scorer.penalize_behavior(peer_id, PENALTY[reason])
        if reason is RefusalReason.OVER_BUDGET:
            with self._counters.locked() as stats:
                stats.graylisted_rpcs += 1
        self._policy.charge(peer_id, Cost.REFUSAL)  # transport refusals count toward bans

    def ban(self, peer_id: ID, ban: Ban) -> None:
        """`peer_id` crossed its cost budget's ban level: recorded, then disconnected (its
        new connections, streams and messages are refused by the policy until the ban ends)."""
        peer = self._policy.peer_str(peer_id.to_bytes())
        logger.warning("banning %s for %.0f s: %s", peer, ban.until - time.monotonic(), ban.reason)
        detail = f"banned: {ban.reason}"
        self._rejections.note(peer, RefusalReason.OVER_BUDGET, detail, at_once=True)
        with self._counters.locked() as stats:
            stats.cost_bans += 1
        self.pubsub.manager.run_task(abort_peer_connections, self._host.get_network(), peer_id)

    # ------------------------------------------------------------------ counting callbacks

    def _count(self, name: str, amount: int) -> None:
        """Add to one of the integer counters of `Libp2pStats` (named by the router)."""
        with self._counters.locked() as stats:
            setattr(stats, name, getattr(stats, name) + amount)

    def _count_queue_drop(self) -> None:
        with self._counters.locked() as stats:
            stats.outbound_dropped += 1

    def _count_queue_discard(self, count: int) -> None:
        logger.warning("a peer stream died with %d RPCs still queued for it", count)
        with self._counters.locked() as stats:
            stats.outbound_discarded += count

    def _count_peer_error(self, where: str, exc: BaseException) -> None:
        logger.warning("pubsub %s error caused by a peer (contained): %r", where, exc)
        self._counters.handler_error(f"pubsub_{where}", exc)
