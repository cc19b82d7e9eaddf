"""How a node's groups reach its peers, and peers' groups reach it: the exchange protocols.

An exchange moves signed groups; it does not decide what to train on or record anything.
`publish` takes this round's signed groups; `collect` returns the peers' groups that
passed the cheap checks (`Accepted`) and every refusal (`Rejection`), for the caller to
verify fully (task rebuilt, rewards re-scored), pool and record exactly as it always did.

- `GossipExchange` (`p2p.exchange = "gossip"`): every group to every node on the rollout
  topic, each checked by the gossip validator (`Verifier.admit`). A node's cost grows
  with the swarm.
- `swarm.exchange.pull.PullExchange` (`p2p.exchange = "pull"`): nodes serve small signed
  announcements of their groups; each node asks a few peers sampled from a random view
  of the swarm and pulls only the groups it samples. A node's cost does not grow with
  the swarm (docs/SCALE.md).

Deliberately not here: full verification, pools, ledgers, sampling for training.
"""

from __future__ import annotations

import collections
import threading
from typing import Protocol

from swarm.core.errors import TransportError
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

    def take_counters(self) -> dict:
        """What the protocol did since the last call (for reports and benchmarks)."""


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
        self.cheap_checked = 0  # groups through the validator (on the transport's thread)

    def start(self) -> None:
        self.transport.subscribe(self.topic, self.validate)

    def validate(self, message: InboundMessage) -> str | None:
        accepted, rejected = self.verifier.admit(message.data, message.source)
        self.cheap_checked += len(accepted) + len(rejected)
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

    def take_counters(self) -> dict:
        out = {
            "cheap_checked": self.cheap_checked,
            "publish_failures": self.publish_failures,
            "published_bytes": self.published_bytes,
            "rejections_dropped": self.pending.dropped,
        }
        self.cheap_checked = self.publish_failures = self.published_bytes = 0
        return out
