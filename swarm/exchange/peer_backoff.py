"""Which peers a round may wait on: not those that failed to answer, until heard of anew.

A peer that vanished (its machine asleep, its NAT mapping gone) often leaves its TCP
connection open: every fetch from it waits for its whole timeout. Asked again every round,
it would cost every round that timeout. So a peer that failed to answer in time, or whose
address could not be dialled, is *suspended*: it is not asked, dialled, sampled or put back
in the view until both its backoff has passed (2 rounds, doubling with each failure in a
row, at most 64) and it has been heard of anew since (it fetched from us, or a fetched view
named it). A peer that answers is cleared. Backoff counts rounds (view refreshes), not
seconds, so that it means the same in a simulation and over the network; over libp2p a
suspended peer is tried again only off the round (a probe), so its retries cost no round.

A node also *vouches* for the peers it has seen alive: one that answered a fetch, fetched
from us, or is connected as a bootstrap peer. Addresses learned from a view are not
vouched for: such a peer is probed off the round (`swarm.exchange.pull`) before the round
waits on it.

Pure: the clock (a round count) is passed in. Bounded: at most `capacity` peers remembered each way.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

FIRST_BACKOFF = 2  # rounds
MOST_BACKOFF = 64
CAPACITY = 4096


@dataclass
class _Suspension:
    failures: int
    until: float  # not asked before this round
    heard: bool = False  # heard of anew since it failed


class PeerBackoff:
    """Suspended and vouched-for peers (see the module docstring)."""

    def __init__(
        self,
        first_s: float = FIRST_BACKOFF,
        most_s: float = MOST_BACKOFF,
        capacity: int = CAPACITY,
    ):
        self.first_s = first_s
        self.most_s = most_s
        self.capacity = capacity
        self._suspended: collections.OrderedDict[str, _Suspension] = collections.OrderedDict()
        self._vouched: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.failures = 0  # failures noted since the start

    def failed(self, peer: str, now: float, stalled: bool = False) -> None:
        """`peer` did not answer (or could not be dialled): suspended, its backoff doubled;
        one that `stalled` (took a fetch it had announced and sent nothing) for the longest
        backoff at once."""
        self.failures += 1
        self._vouched.pop(peer, None)
        before = self._suspended.pop(peer, None)
        count = before.failures + 1 if before else 1
        wait = min(self.most_s, self.first_s * 2 ** (count - 1))
        if stalled:
            wait = self.most_s
        self._suspended[peer] = _Suspension(count, now + wait)
        while len(self._suspended) > self.capacity:
            self._suspended.popitem(last=False)

    def answered(self, peer: str) -> None:
        """`peer` answered a fetch: cleared and vouched for."""
        self._suspended.pop(peer, None)
        self.vouch(peer)

    def vouch(self, peer: str) -> None:
        """`peer` was seen alive (it fetched from us, or is a connected bootstrap peer)."""
        if peer in self._suspended:
            self.heard(peer)
            return
        self._vouched[peer] = None
        self._vouched.move_to_end(peer)
        while len(self._vouched) > self.capacity:
            self._vouched.popitem(last=False)

    def heard(self, peer: str) -> None:
        """`peer` was heard of anew: once its backoff has passed it may be asked again."""
        suspension = self._suspended.get(peer)
        if suspension is not None:
            suspension.heard = True

    def suspended(self, peer: str, now: float) -> bool:
        """Whether `peer` may not be asked or dialled now."""
        suspension = self._suspended.get(peer)
        if suspension is None:
            return False
        if suspension.heard and now >= suspension.until:
            return False  # its turn again; a failure now doubles its backoff
        return True

    def vouched(self, peer: str) -> bool:
        return peer in self._vouched

    def remembered(self) -> tuple[int, int]:
        """(peers suspended, peers vouched for) held in memory, each at most `capacity`."""
        return len(self._suspended), len(self._vouched)

    def count(self, now: float) -> int:
        """Peers suspended now."""
        return sum(self.suspended(p, now) for p in self._suspended)
