"""A peer's list is read once, and a peer whose lists offer nothing is asked less often.

Each round a pull node takes up to `pull_lists` lists, and over libp2p asks a list again in
the round when it has grown older than `fresh_list_s` (`swarm.exchange.pull_later`). A list
that did not change since it was last taken (the same bytes) gets the same verdict: its
announcements are not checked again (`ListVerdicts`, by the SHA-256 of the bytes; the
verdict is the announcements that passed every cheap check, and the list's holder hints).
Before, a peer serving 256 announcements had them checked every time its list was taken,
twice a round.

A list offers something when at least one of its announcements is one this node would pull
now (`swarm.exchange.pull_choice.choose_pulls`: fresh, not too many versions behind, with
signal, not pulled already). A peer whose lists offer nothing (every announcement of a
version the node skips as too old, say) is not asked for its list for a while
(`ListBackoff`): after the second such list in a row 1 round, doubling with each one more,
at most `MOST_REST` rounds; a list that offers something clears it. (One such list alone
rests nothing: a peer that has just started serves an empty list until its first round.) Such a peer is still in the view
and the history sample, and may still serve groups as a holder: only its list is asked less
often, so the round's list slots go to other peers. An unchanged list that offered nothing,
taken off the round and old by now, is not asked again in the round either.

Pure: no I/O; rounds are counted by the caller. Bounded: at most `capacity` peers each.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from swarm.wire import GroupAnnouncement, HolderHint

VERDICT_PEERS = 64  # peers whose last list's verdict is kept
FIRST_REST = 1  # rounds a peer is not asked after two lists in a row that offered nothing
MOST_REST = 16  # ... doubling with each such list more, at most this
CAPACITY = 4096


@dataclass(frozen=True)
class Verdict:
    """What a list gave once checked: the announcements that passed every cheap check (and
    the family filter), and its holder hints."""

    announcements: tuple[GroupAnnouncement, ...]
    hints: tuple[HolderHint, ...]


class ListVerdicts:
    """The verdict of each peer's last list, kept by the SHA-256 of its bytes."""

    def __init__(self, capacity: int = VERDICT_PEERS):
        self.capacity = capacity
        self._last: collections.OrderedDict[str, tuple[str, Verdict]] = collections.OrderedDict()

    def get(self, peer: str, digest: str) -> Verdict | None:
        """The verdict of `peer`'s list if its bytes hash to `digest` (unchanged), else None."""
        last = self._last.get(peer)
        if last is None or last[0] != digest:
            return None
        self._last.move_to_end(peer)
        return last[1]

    def put(self, peer: str, digest: str, verdict: Verdict) -> None:
        self._last[peer] = (digest, verdict)
        self._last.move_to_end(peer)
        while len(self._last) > self.capacity:
            self._last.popitem(last=False)

    def __len__(self) -> int:
        return len(self._last)


@dataclass
class _Rest:
    lists: int  # lists in a row that offered nothing
    until: int  # not asked before this round


class ListBackoff:
    """Peers whose lists offered nothing, resting (not asked for lists) for a while."""

    def __init__(self, first: int = FIRST_REST, most: int = MOST_REST, capacity: int = CAPACITY):
        self.first = first
        self.most = most
        self.capacity = capacity
        self._rest: collections.OrderedDict[str, _Rest] = collections.OrderedDict()

    def offered(self, peer: str, anything: bool, round_: int) -> None:
        """`peer`'s list, taken in round `round_`, offered something (cleared) or nothing
        (from the second such list in a row, resting: not asked for the next `first`
        rounds, doubling with each such list more, at most `most`)."""
        before = self._rest.pop(peer, None)
        if anything:
            return
        lists = before.lists + 1 if before else 1
        rest = min(self.most, self.first * 2 ** (lists - 2)) if lists > 1 else 0
        self._rest[peer] = _Rest(lists, round_ + 1 + rest)
        while len(self._rest) > self.capacity:
            self._rest.popitem(last=False)

    def resting(self, peer: str, round_: int) -> bool:
        """Whether `peer` is not to be asked for its list in round `round_`."""
        rest = self._rest.get(peer)
        return rest is not None and round_ < rest.until

    def resting_peers(self, round_: int) -> set[str]:
        return {p for p, rest in self._rest.items() if round_ < rest.until}
