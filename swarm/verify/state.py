"""The bounded memories verification consults: seen nonces, rate buckets, recent completions.

Each class is plain data with explicit times passed in (no clock reads), bounded in size,
and not thread-safe on its own: `swarm.verify.gate.Verifier` serialises access.

Deliberately not here: deciding what to reject (`swarm.verify.rules`) or scoring peers
(`swarm.verify.reputation`).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from swarm.tasks import TaskSpec

NONCE_MEMORY = 200_000  # (sender, nonce) pairs a verifier remembers at most


class NonceCache:
    """(sender, nonce) -> content hash of the group that first used it, for `ttl_s` seconds.

    Groups older than the verifier's age limit are rejected anyway, so remembering nonces for
    that long is enough to catch every replay of an acceptable group.
    """

    def __init__(self, ttl_s: float, capacity: int = NONCE_MEMORY):
        self.ttl_s = ttl_s
        self.capacity = capacity
        self._seen: collections.OrderedDict[tuple[str, bytes], tuple[str, float]] = collections.OrderedDict()

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
            if len(self._seen) <= self.capacity and (self.ttl_s <= 0 or seen_at >= now - self.ttl_s):
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
        self.tokens = min(self.capacity, self.tokens + max(0.0, now - self.updated) * self.rate * rate_factor)
        self.updated = max(self.updated, now)

    def take(self, n: float) -> bool:
        """Take `n` tokens if they are all there; otherwise take none."""
        if n > self.tokens:
            return False
        self.tokens -= n
        return True


class RateLimits:
    """One token bucket per sender (created full), at most `max_peers` remembered."""

    def __init__(self, rate: float, burst: float, max_peers: int = 100_000):
        self.rate, self.burst, self.max_peers = rate, burst, max_peers
        self._buckets: collections.OrderedDict[str, TokenBucket] = collections.OrderedDict()

    def allows(self, sender: str, n: int, now: float, rate_factor: float = 1.0) -> bool:
        """Whether `sender` may send `n` more groups now (taking them from its bucket if so)."""
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
        self._by_spec: collections.OrderedDict[TaskSpec, list[tuple[str, tuple[bytes, ...]]]] = collections.OrderedDict()

    def get(self, spec: TaskSpec) -> list[tuple[str, tuple[bytes, ...]]]:
        return list(self._by_spec.get(spec, ()))

    def add(self, spec: TaskSpec, group: tuple[str, tuple[bytes, ...]]) -> None:
        groups = self._by_spec.setdefault(spec, [])
        groups.append(group)
        del groups[8:]  # the first few are the originals; later ones tell nothing new
        self._by_spec.move_to_end(spec)
        while len(self._by_spec) > self.capacity:
            self._by_spec.popitem(last=False)

