"""Each peer's share of this node's verification time.

Rebuilding a peer's task and scoring its completions costs what the peer's spec and text
make it cost, up to the per-group deadline (`swarm.verify.rescore_pool`). The deadline bounds
one group; this bounds a peer: a bucket of seconds per peer, `burst_s` full, refilled at
`share` seconds per second. A group is verified while its peer's bucket holds any time;
what it took is then taken out, so the bucket may go below zero (by at most one deadline)
and the peer waits until it refills. A peer sending only costly groups thus makes this
node spend at most `burst_s` at once, then `share` of its time: its groups in between are
rejected (`verify_budget`, a soft reason) without being run.

Plain data with the time passed in, bounded in peers, not thread-safe on its own: the
verifier serialises access.
"""

from __future__ import annotations

import collections

from swarm.verify.tracking import TokenBucket


class VerifyBudget:
    """Seconds of verification per peer (see the module docstring); `burst_s` 0: no limit."""

    def __init__(self, share: float, burst_s: float, max_peers: int = 100_000):
        self.share, self.burst_s, self.max_peers = share, burst_s, max_peers
        self._buckets: collections.OrderedDict[str, TokenBucket] = collections.OrderedDict()

    def _bucket(self, peer: str, now: float) -> TokenBucket:
        bucket = self._buckets.get(peer)
        if bucket is None:
            bucket = self._buckets[peer] = TokenBucket(self.burst_s, self.share, self.burst_s, now)
            while len(self._buckets) > self.max_peers:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(peer)
        bucket.refill(now)
        return bucket

    def allows(self, peer: str, now: float) -> bool:
        """Whether `peer` has verification time left now."""
        return self.burst_s <= 0 or self._bucket(peer, now).tokens > 0

    def charge(self, peer: str, seconds: float, now: float) -> None:
        """Take what verifying one of `peer`'s groups cost."""
        if self.burst_s > 0:
            self._bucket(peer, now).tokens -= max(0.0, seconds)

    def left(self, peer: str, now: float) -> float:
        """Seconds `peer` has left (negative: in debt); infinite without a limit."""
        return float("inf") if self.burst_s <= 0 else self._bucket(peer, now).tokens
