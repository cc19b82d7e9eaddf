"""A transport that takes one topic's messages off the shared inbox for a handler.

A generator's follower takes its delta manifests this way, so the node's rollout path
never sees them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from swarm.p2p.transport import (
    BlobServed,
    FetchLimits,
    InboundMessage,
    PeerInfo,
    RefusalHook,
    Transport,
    TransportStats,
    Validator,
)


class TopicTap(Transport):
    """A transport whose `receive()` hands one topic's messages to `handler` instead.

    Lets a follower take its delta manifests off the shared inbox without the node's
    rollout path ever seeing them. Everything else is the wrapped transport's.
    """

    def __init__(
        self, inner: Transport, topic: str, handler: Callable[[InboundMessage], None]
    ) -> None:
        self.inner = inner
        self.peer_id = inner.peer_id
        self.tapped_topic = topic
        self.handler = handler
        self._held: list[InboundMessage] = []  # others' messages drained early by `pump`

    def pump(self) -> None:
        """Hand the tapped topic's waiting messages to the handler now; keep the rest for
        `receive`."""
        self._held += self._route(self.inner.receive())

    def receive(
        self, max_messages: int | None = None, timeout: float = 0.0
    ) -> list[InboundMessage]:
        if self._held:
            take = len(self._held) if max_messages is None else max_messages
            out, self._held = self._held[:take], self._held[take:]
            return out
        return self._route(self.inner.receive(max_messages, timeout))

    def _route(self, messages: list[InboundMessage]) -> list[InboundMessage]:
        kept = []
        for message in messages:
            if message.topic == self.tapped_topic:
                self.handler(message)
            else:
                kept.append(message)
        return kept

    def start(self) -> None:
        self.inner.start()

    def close(self) -> None:
        self.inner.close()

    def subscribe(self, topic: str, validator: Validator | None = None) -> None:
        self.inner.subscribe(topic, validator)

    def publish(self, topic: str, data: bytes) -> None:
        self.inner.publish(topic, data)

    def peers(self) -> list[PeerInfo]:
        return self.inner.peers()

    def listen_addrs(self) -> list[str]:
        return self.inner.listen_addrs()

    def serve_blob(self, key: str, data: bytes) -> None:
        self.inner.serve_blob(key, data)

    def unserve_blob(self, key: str) -> None:
        self.inner.unserve_blob(key)

    def fetch_blob(
        self, peer_id: str, key: str, timeout: float = 30.0, limits: FetchLimits | None = None
    ) -> bytes:
        return self.inner.fetch_blob(peer_id, key, timeout, limits)

    def served_blobs(self, prefix: str = "") -> list[BlobServed]:
        return self.inner.served_blobs(prefix)

    def learn_peer(self, peer_id: str, addrs: Sequence[str]) -> None:
        self.inner.learn_peer(peer_id, addrs)

    def stats(self) -> TransportStats:
        return self.inner.stats()

    def set_refusal_hook(self, hook: RefusalHook | None) -> None:
        self.inner.set_refusal_hook(hook)  # the wrapped transport is the one that refuses

    def __getattr__(self, name: str):
        # flush, wait_for_topic_peers and other extras of the concrete transport.
        return getattr(self.inner, name)
