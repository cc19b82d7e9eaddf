"""A uniform sample of every peer ID a node has heard of, that repetition cannot bias.

The peers a node asks for announcements each round must be a uniform sample of the swarm,
and a few hostile identities must not be able to crowd them out. A Cyclon-style view alone
cannot promise that: a peer that fetches every node's view each round is entered in every
view at age 0, and colluders that serve views listing only each other at age 0 fill the
views of whoever shuffles with them. What they cannot change is *which* identities exist.

So, after Brahms's history samplers (Bortnikov et al., "Brahms: Byzantine resilient random
membership sampling", 2009), each node keeps a min-wise sample of every ID it was ever told
of: with a secret key, the `capacity` IDs whose keyed hash is smallest (a bottom-k sketch:
a uniform random subset of the distinct IDs seen, without replacement). An ID told a
thousand times counts once, and nobody can choose IDs that hash small without the key. A
hostile share h of the identities therefore gets a share h of the sample, however loudly
they push and however many views they fill, as long as the honest IDs are heard of at all.

A min-wise sample is uniform over the IDs *heard of*, and loud identities are heard of
first: until a node has heard of most of the swarm, they are over-represented. So the node
also estimates how many distinct IDs it has heard of (`DistinctCount`, a bottom-k estimate
that never forgets) and, while that still grows fast, hears more views a refresh
(`views_to_hear`): the head start of loud identities closes in a few refreshes, not in as
many as the swarm is large.

The sample is fixed for a fixed key, so keys rotate: every `epoch` refreshes the next
sketch (fed with every ID since the last rotation, under a new key) replaces the current
one. A peer that does not answer leaves the sketch (it may re-enter only by hashing below
the sketch's bound, as any other ID).

Pure, no I/O (`swarm.exchange.peer_view` feeds and draws from it).
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Callable, Iterable

DEFAULT_SKETCH = 128
DEFAULT_EPOCH = 50
HEARD_SKETCH = 512  # hashes kept to count the IDs heard of (about 4 % error)


def keyed_hash(peer: str, key: bytes) -> bytes:
    """The rank of `peer` under a secret `key`: nobody without the key can choose it."""
    return hashlib.blake2b(peer.encode(), key=key, digest_size=8).digest()


class BottomK:
    """The `capacity` IDs with the smallest keyed hash among all IDs fed (see above)."""

    def __init__(self, capacity: int, key: bytes):
        self.capacity = capacity
        self.key = key
        self.kept: dict[str, bytes] = {}  # ID -> its keyed hash
        self._bound: bytes | None = None  # the largest kept hash, once full

    def rank(self, peer: str) -> bytes:
        return keyed_hash(peer, self.key)

    def feed(self, peer: str) -> None:
        if peer in self.kept or self.capacity <= 0:
            return
        h = self.rank(peer)
        if self._bound is not None and h >= self._bound:
            return
        self.kept[peer] = h
        if len(self.kept) > self.capacity:
            worst = max(self.kept, key=self.kept.__getitem__)
            del self.kept[worst]
        if len(self.kept) >= self.capacity:
            self._bound = max(self.kept.values())

    def drop(self, peer: str) -> None:
        """Out (it did not answer); the bound stays, so the gap is not filled by whoever
        happens to be fed next."""
        self.kept.pop(peer, None)


class DistinctCount:
    """How many distinct IDs were fed, estimated from the `k` smallest keyed hashes: exact
    below `k`, then (k - 1) / (largest kept hash as a share of the hash space), a relative
    error of about 1/sqrt(k). It never forgets, so it only grows; it keeps `k` integers."""

    def __init__(self, key: bytes, k: int = HEARD_SKETCH):
        self.key = key
        self.k = k
        self._heap: list[int] = []  # the k smallest hashes, negated (a max-heap)
        self._kept: set[int] = set()

    def feed(self, peer: str) -> None:
        h = int.from_bytes(keyed_hash(peer, self.key), "big")
        if h in self._kept or self.k <= 0:
            return
        if len(self._heap) < self.k:
            heapq.heappush(self._heap, -h)
            self._kept.add(h)
        elif h < -self._heap[0]:
            self._kept.discard(-heapq.heappushpop(self._heap, -h))
            self._kept.add(h)

    def estimate(self) -> float:
        if len(self._heap) < self.k or self.k < 2:
            return float(len(self._heap))
        return (self.k - 1) * 2.0**64 / (-self._heap[0] + 1)


NOVEL = 0.05  # a share of the entries heard that were new: the node is still learning IDs


def views_to_hear(now: int, novel: float, base: int, most: int) -> int:
    """Views to hear from sampled peers next refresh, given `now` heard this one and the
    share `novel` of their entries that were IDs new to the node: twice as many while at
    least `NOVEL` were new, half as many (not below `base`) once fewer were; at most `most`."""
    if novel >= NOVEL:
        return max(base, min(most, max(1, 2 * now)))
    return max(base, min(most, now // 2))


class HistorySample:
    """Two bottom-k sketches under rotating secret keys: draw from the current one."""

    def __init__(
        self,
        rng: random.Random,
        capacity: int = DEFAULT_SKETCH,
        epoch: int = DEFAULT_EPOCH,
    ):
        self.rng = rng
        self.capacity = capacity
        self.epoch = epoch
        self.current = BottomK(capacity, rng.randbytes(16))
        self.next = BottomK(capacity, rng.randbytes(16))
        self.heard = DistinctCount(rng.randbytes(16))
        self.refreshes = 0

    def feed(self, peers: Iterable[str]) -> None:
        for peer in peers:
            if peer:
                self.current.feed(peer)
                self.next.feed(peer)
                self.heard.feed(peer)

    def drop(self, peer: str) -> None:
        self.current.drop(peer)
        self.next.drop(peer)

    def tick(self) -> None:
        """One refresh passed: every `epoch` of them the next sketch becomes the current."""
        self.refreshes += 1
        if self.epoch > 0 and self.refreshes % self.epoch == 0 and self.next.kept:
            self.current = self.next
            self.next = BottomK(self.capacity, self.rng.randbytes(16))
            self.next.kept = {}
            for peer in self.current.kept:  # a uniform subset of the older history
                self.next.feed(peer)

    def peers(self) -> list[str]:
        return sorted(self.current.kept)

    def holds(self, peer: str) -> bool:
        """In the current or the next sketch: a peer that may be drawn, now or after the
        next rotation (its addresses must be known to reach it)."""
        return peer in self.current.kept or peer in self.next.kept

    def sample(self, k: int, allowed: Callable[[str], bool] | None = None) -> list[str]:
        """`k` distinct IDs drawn uniformly from the current sketch (all if it holds fewer),
        of those `allowed` (a peer suspended or banned is not drawn)."""
        ordered = [p for p in self.peers() if allowed is None or allowed(p)]
        return self.rng.sample(ordered, min(k, len(ordered)))
