"""The bounded memories verification consults: seen nonces, rate buckets, recent completions,
and what the gossip validator decoded from messages still waiting in the inbox.

Each class is plain data with explicit times passed in (no clock reads), bounded in size,
and not thread-safe on its own: `swarm.verify.gate.Verifier` serialises access.

Deliberately not here: deciding what to reject (`swarm.verify.rules`) or scoring peers
(`swarm.verify.reputation`).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Generic, TypeVar

import blake3

from swarm.tasks import TaskSpec

NONCE_MEMORY = 200_000  # (sender, nonce) pairs a verifier remembers at most
T = TypeVar("T")


class NonceCache:
    """(sender, nonce) -> content hash of the group that first used it, for `ttl_s` seconds.

    Groups older than the verifier's age limit are rejected anyway, so remembering nonces for
    that long is enough to catch every replay of an acceptable group.
    """

    def __init__(self, ttl_s: float, capacity: int = NONCE_MEMORY):
        self.ttl_s = ttl_s
        self.capacity = capacity
        self._seen: collections.OrderedDict[tuple[str, bytes], tuple[str, float]] = (
            collections.OrderedDict()
        )

    def lookup(self, sender: str, nonce: bytes) -> str | None:
        """The content hash first seen with this sender and nonce, or None."""
        item = self._seen.get((sender, nonce))
        return None if item is None else item[0]

    def add(self, sender: str, nonce: bytes, content_hash: str, now: float) -> None:
        self._seen.setdefault((sender, nonce), (content_hash, now))
        self.expire(now)

    def expire(self, now: float) -> None:
        while self._seen:
            _, (_, seen_at) = next(iter(self._seen.items()))
            if len(self._seen) <= self.capacity and (
                self.ttl_s <= 0 or seen_at >= now - self.ttl_s
            ):
                break
            self._seen.popitem(last=False)

    def __len__(self) -> int:
        return len(self._seen)


@dataclass
class TokenBucket:
    """A rate limit: `capacity` groups at once, refilled at `rate` groups per second."""

    capacity: float
    rate: float
    tokens: float
    updated: float

    def refill(self, now: float, rate_factor: float = 1.0) -> None:
        self.tokens = min(
            self.capacity, self.tokens + max(0.0, now - self.updated) * self.rate * rate_factor
        )
        self.updated = max(self.updated, now)

    def take(self, n: float) -> bool:
        """Take `n` tokens if they are all there; otherwise take none."""
        if n > self.tokens:
            return False
        self.tokens -= n
        return True


class RateLimits:
    """One token bucket per sender (created full), at most `max_peers` remembered. A `rate`
    or `burst` of 0 turns the limit off (as 0 does in every `verify.rate_*` key)."""

    def __init__(self, rate: float, burst: float, max_peers: int = 100_000):
        self.rate, self.burst, self.max_peers = rate, burst, max_peers
        self._buckets: collections.OrderedDict[str, TokenBucket] = collections.OrderedDict()

    def allows(self, sender: str, n: int, now: float, rate_factor: float = 1.0) -> bool:
        """Whether `sender` may send `n` more groups now (taking them from its bucket if so)."""
        if self.rate <= 0 or self.burst <= 0:
            return True  # off
        bucket = self._buckets.get(sender)
        if bucket is None:
            bucket = self._buckets[sender] = TokenBucket(self.burst, self.rate, self.burst, now)
            while len(self._buckets) > self.max_peers:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(sender)
        bucket.refill(now, rate_factor)
        return bucket.take(n)


class RecentGroups:
    """(sender, completion fingerprints) of groups accepted or sent by us, per task spec: copycat memory.

    The newest `capacity` specs are kept, and the first few groups of each.
    """

    def __init__(self, capacity: int = 50_000):
        self.capacity = capacity
        self._by_spec: collections.OrderedDict[TaskSpec, list[tuple[str, tuple[bytes, ...]]]] = (
            collections.OrderedDict()
        )

    def get(self, spec: TaskSpec) -> list[tuple[str, tuple[bytes, ...]]]:
        return list(self._by_spec.get(spec, ()))

    def add(self, spec: TaskSpec, group: tuple[str, tuple[bytes, ...]]) -> None:
        groups = self._by_spec.setdefault(spec, [])
        groups.append(group)
        del groups[8:]  # the first few are the originals; later ones tell nothing new
        self._by_spec.move_to_end(spec)
        while len(self._by_spec) > self.capacity:
            self._by_spec.popitem(last=False)


class DecodedMessages(Generic[T]):
    """What the gossip validator made of a message, until the round loop takes it from the inbox.

    A transport hands the validator and the inbox separate copies of a message, so it is
    found again by its bytes (a blake3 digest) and its libp2p source. Bounded in messages
    and in their bytes, oldest out first (`evicted` counts them): a message taken after its
    entry left is simply decoded again.
    """

    def __init__(self, max_messages: int = 8192, max_bytes: int = 64 << 20):
        self.max_messages, self.max_bytes = max_messages, max_bytes
        # (source, digest) -> (value, bytes of the message)
        self._items: collections.OrderedDict[tuple[str, bytes], tuple[T, int]]
        self._items = collections.OrderedDict()
        self._bytes = 0
        self.evicted = 0

    def put(self, source: str, data: bytes, value: T) -> None:
        key = (source, blake3.blake3(data).digest())
        old = self._items.pop(key, None)
        self._bytes += len(data) - (old[1] if old else 0)
        self._items[key] = (value, len(data))
        while len(self._items) > self.max_messages or self._bytes > self.max_bytes:
            _, (_, size) = self._items.popitem(last=False)
            self._bytes -= size
            self.evicted += 1

    def take(self, source: str, data: bytes) -> T | None:
        """The value put for these bytes from this source (removed), or None."""
        item = self._items.pop((source, blake3.blake3(data).digest()), None)
        if item is None:
            return None
        self._bytes -= item[1]
        return item[0]

    def __len__(self) -> int:
        return len(self._items)
