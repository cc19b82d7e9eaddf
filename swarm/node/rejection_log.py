"""What the node writes about refused messages: a bounded number of rows per peer, counts beyond.

Every refusal is kept, but not every refusal is worth a ledger row. A rejected group becomes
a row (with its signed bytes, for replay and forensics) while its peer has rows left in the
current window (`ledger.rejected_rows_per_peer` per `ledger.count_window_s`); beyond that it
is counted, one counter per (peer, reason) that the ledger sums per window
(`rejection_counts`). Duplicates, a banned peer's messages and collateral rejections (the
good groups of a refused message) are always only counted: they tell nothing a row would
add. So a peer can make the node write at most its quota of rows, plus a few counters, per
window, however much it sends; and the rows waiting for the round loop are bounded in
number and bytes (past either bound a rejection is counted instead, never dropped). A restarted
node reads back the rows it wrote in the current window (`restore`), so a restart does not
renew a quota.

Refusals by the transport itself (`swarm.p2p.transport.Refusal`) are counted apart
(`refused`): they are not groups, so they do not enter the node's group totals.

Thread-safe: the gossip validator and the transport's refusal hook note from the network
thread, the round loop takes from its own.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason
from swarm.verify.gate import blamed_peer
from swarm.verify.message import Rejection
from swarm.wire.signing import check_group_signature

COUNTED_ONLY = frozenset({Reason.DUPLICATE, Reason.BANNED, Reason.IN_REJECTED_MESSAGE})
MAX_PENDING_ROWS = 10_000
MAX_PENDING_BYTES = 64 << 20
MAX_COUNTERS = 100_000  # (peer, reason) pairs between two rounds; past it: counted under peer ""


@dataclass(frozen=True)
class Taken:
    """What the round loop stores: rejections as rows, and counts by (peer, reason)."""

    rows: list[Rejection]
    counts: dict[tuple[str, Reason], int]  # rejected groups counted, not stored
    refused: dict[tuple[str, Reason], int]  # what the transport refused (not groups)


class RowQuota:
    """Rows each peer may still have written in the current window (plain data, no clock)."""

    def __init__(self, rows_per_window: int, window_s: float, max_peers: int = 100_000):
        self.rows_per_window, self.window_s, self.max_peers = rows_per_window, window_s, max_peers
        self._used: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()

    def take(self, peer: str, now: float) -> bool:
        """Whether one more row of `peer` may be written now (and count it if so)."""
        window = self._window(now)
        start, used = self._used.get(peer, (window, 0))
        if start != window:
            used = 0
        if used >= self.rows_per_window:
            return False
        self._set(peer, window, used + 1)
        return True

    def restore(self, peer: str, used: int, now: float) -> None:
        """`used` rows of `peer` were already written in the window of `now` (by this node
        before a restart): they count against its quota."""
        window = self._window(now)
        start, before = self._used.get(peer, (window, 0))
        self._set(peer, window, used + (before if start == window else 0))

    def window_start(self, now: float) -> float:
        """When the window of `now` began (0 without windows: the quota never renews)."""
        return self._window(now) * self.window_s

    def _window(self, now: float) -> int:
        return int(now // self.window_s) if self.window_s > 0 else 0

    def _set(self, peer: str, window: int, used: int) -> None:
        self._used[peer] = (window, used)
        self._used.move_to_end(peer)
        while len(self._used) > self.max_peers:
            self._used.popitem(last=False)


class RejectionLog:
    """Refusals waiting for the round loop: rows within quota, counts beyond (see above)."""

    def __init__(self, rows_per_window: int, window_s: float):
        self._quota = RowQuota(rows_per_window, window_s)
        self._lock = threading.Lock()
        self._rows: list[Rejection] = []
        self._row_bytes = 0
        self._counts: collections.Counter[tuple[str, Reason]] = collections.Counter()
        self._refused: collections.Counter[tuple[str, Reason]] = collections.Counter()

    def note(self, rejection: Rejection, now: float) -> None:
        """One rejected group (or undecodable message): a row if its peer has quota, else a count."""
        peer = blamed_peer(rejection.source, rejection.sender, rejection.reason)
        size = len(rejection.signed.body) if rejection.signed is not None else 0
        with self._lock:
            if (
                rejection.reason in COUNTED_ONLY
                or len(self._rows) >= MAX_PENDING_ROWS
                or self._row_bytes + size > MAX_PENDING_BYTES
                or not self._quota.take(peer, now)
            ):
                self._add(self._counts, peer, rejection.reason, 1)
                return
            self._rows.append(rejection)
            self._row_bytes += size

    def window_start(self, now: float) -> float:
        """When the current quota window began."""
        return self._quota.window_start(now)

    def restore(self, rows: Iterable[tuple[str, str, str, int]], now: float) -> None:
        """Rows already written in this window, as (source, sender, reason, rows) from the
        ledger (`swarm.ledger.rejected_rows_since`): a restart does not renew a peer's quota."""
        used: collections.Counter[str] = collections.Counter()
        for source, sender, reason, n in rows:
            used[blamed_peer(source, sender, _reason(reason))] += n
        with self._lock:
            for peer, n in used.items():
                self._quota.restore(peer, n, now)

    def refused(self, peer: str, reason: Reason, count: int = 1) -> None:
        """What the transport refused from `peer` by itself (counted, never a row)."""
        with self._lock:
            self._add(self._refused, peer, reason, count)

    @staticmethod
    def _add(counter: collections.Counter, peer: str, reason: Reason, n: int) -> None:
        if (peer, reason) not in counter and len(counter) >= MAX_COUNTERS:
            peer = ""
        counter[(peer, reason)] += n

    def waiting(self) -> bool:
        """Whether anything was noted since the last `take`."""
        with self._lock:
            return bool(self._rows or self._counts or self._refused)

    def take(self) -> Taken:
        """Everything noted since the last call."""
        with self._lock:
            taken = Taken(self._rows, dict(self._counts), dict(self._refused))
            self._rows, self._row_bytes = [], 0
            self._counts.clear()
            self._refused.clear()
        return taken


def signed_by_sender(rejection: Rejection) -> bool:
    """Whether a rejected group's claimed sender signed it (else the claim means nothing)."""
    if not rejection.sender or rejection.signed is None:
        return False
    try:
        check_group_signature(rejection.signed, rejection.sender)
    except RejectedMessage:
        return False
    return True


def _reason(text: str) -> Reason | None:
    """The `Reason` a ledger row names (None for one this version does not know)."""
    try:
        return Reason(text)
    except ValueError:
        return None
