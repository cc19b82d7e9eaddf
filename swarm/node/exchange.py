"""How a node's groups reach its peers, and peers' groups reach it: the exchange protocols.

An exchange moves signed groups; it does not decide what to train on or record anything.
`publish` takes this round's signed groups; `collect` returns the peers' groups that
passed the cheap checks (`Accepted`) and every refusal (`Rejection`), for the caller to
verify fully (task rebuilt, rewards re-scored), pool and record exactly as it always did.

- `GossipExchange` is the protocol every version so far has spoken: every group to every
  node on the rollout topic, each checked by the gossip validator (`Verifier.admit`).
- `swarm.node.pulling.PullExchange` gossips small signed announcements on topic shards and
  pulls only the groups a node samples.

Deliberately not here: full verification, pools, ledgers, sampling for training.
"""

from __future__ import annotations

import collections
import threading
from typing import Protocol

from swarm.errors import TransportError
from swarm.p2p.transport import InboundMessage, Transport
from swarm.verify.gate import Verifier
from swarm.verify.message import Accepted, Rejection
from swarm.wire import RolloutGroup, SignedGroup, pack_messages, rollout_topic

MAX_PENDING_REJECTIONS = 10_000  # validator rejections waiting for the caller's thread


class Exchange(Protocol):
    """What a node's sharing needs from an exchange protocol."""

    def start(self) -> None:
        """Subscribe to what the protocol listens to (the transport is running)."""

    def publish(self, groups: list[tuple[SignedGroup, RolloutGroup]]) -> None:
        """Offer this round's signed groups to the swarm."""

    def collect(self) -> tuple[list[Accepted], list[Rejection]]:
        """Peers' groups that passed the cheap checks since the last call, and refusals."""


class PendingRejections:
    """Rejections noted on the transport's thread, bounded, taken on the node's thread."""

    def __init__(self, capacity: int = MAX_PENDING_REJECTIONS):
        self.capacity = capacity
        self._items: collections.deque[Rejection] = collections.deque()
        self._lock = threading.Lock()
        self.dropped = 0

    def add(self, rejections: list[Rejection]) -> None:
        with self._lock:
            room = max(self.capacity - len(self._items), 0)
            self._items.extend(rejections[:room])
            self.dropped += max(0, len(rejections) - room)

    def take(self) -> list[Rejection]:
        with self._lock:
            out = list(self._items)
            self._items.clear()
        return out


class GossipExchange:
    """Every group gossiped to every node; the validator runs `Verifier.admit` on each message."""

    def __init__(self, transport: Transport, verifier: Verifier, swarm_id: str):
        self.transport = transport
        self.verifier = verifier
        self.topic = rollout_topic(swarm_id)
        self.pending = PendingRejections()
        self.publish_failures = 0
        self.published_bytes = 0

    def start(self) -> None:
        self.transport.subscribe(self.topic, self.validate)

    def validate(self, message: InboundMessage) -> str | None:
        _, rejected = self.verifier.admit(message.data, message.source)
        if not rejected:
            return None
        self.pending.add(rejected)
        return rejected[0].reason

    def publish(self, groups: list[tuple[SignedGroup, RolloutGroup]]) -> None:
        for message in pack_messages([signed for signed, _ in groups]):
            try:
                self.transport.publish(self.topic, message)
                self.published_bytes += len(message)
            except TransportError:
                self.publish_failures += 1

    def collect(self) -> tuple[list[Accepted], list[Rejection]]:
        accepted: list[Accepted] = []
        rejected: list[Rejection] = []
        for message in self.transport.receive():
            ok, bad = self.verifier.recheck(message.data, message.source)
            accepted += ok
            rejected += bad
        return accepted, rejected + self.pending.take()
