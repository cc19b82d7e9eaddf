"""Many blob fetches at once, within one deadline, each refused beyond the size it may have.

The pull exchange fetches a view, up to `pull_lists` lists and up to `pull_groups`
groups a round. One after another, with a 5 s timeout each, peers that stall could cost a
round 1 + 8 + 10 timeouts; here a round has one time budget, and the fetches of each step
run side by side (`parallel` at a time, on worker threads that each wait on the transport:
libp2p's runs every fetch on its own network thread, so they overlap there), every one
ending by the round's deadline. Every fetch carries a `SizeCap`: a peer that announces more
bytes than the blob may have is refused on its response header, before a byte of the blob
is read (a group's announced size, a list's or a view's protocol limit).

A server runs at most `MAX_FETCHES_PER_PEER` fetches of one peer at once and refuses (and
bills) more; the fetcher opens at most `FETCHES_PER_PEER` at once to one peer (one shared limit,
`swarm.wire.streams`), so an honest node pulling many groups from one sender is never refused.
Requests are started one peer at a time in turn, so a peer with many of them does not hold
every worker.

In-memory transports answer at once from the same thread, so they are fetched in turn.

Deliberately not here: what a failed or refused fetch means (`swarm.exchange.pull`).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from dataclasses import dataclass

from swarm.core.errors import FetchTooSlow, NoFetchSlot, RejectedMessage, TransportError
from swarm.core.reasons import Reason
from swarm.p2p.transport import FetchLimits, MemoryTransport, Transport
from swarm.wire.streams import FETCHES_PER_PEER

PROBES = 32  # fetches off the round at once (views and lists, `swarm.exchange.pull_later`)


STALL_S = 2.0  # a fetch given this long that got no answer at all is a stall, not a slow link
SLOW_S = 0.5  # a fetch that took this long to fail cost the round time (a refusal is quick)


class SizeCap:
    """A `BlobCheck` that refuses a blob by its announced length: above `max_bytes`, or, when
    `exact`, other than `max_bytes` (a group must be exactly the announced size). It also
    notes whether the peer answered at all (`answered`: its response header arrived)."""

    def __init__(self, max_bytes: int, exact: bool = False):
        self.max_bytes = max_bytes
        self.exact = exact
        self.answered = False

    def size(self, nbytes: int) -> None:
        self.answered = True
        if self.exact and nbytes != self.max_bytes:
            raise RejectedMessage(
                Reason.ANNOUNCEMENT_MISMATCH,
                f"served {nbytes} bytes where {self.max_bytes} were announced",
            )
        if nbytes > self.max_bytes:
            raise RejectedMessage(Reason.OVERSIZE, f"{nbytes} bytes, at most {self.max_bytes}")

    def head(self, data: bytes) -> int:
        return 0


@dataclass(frozen=True)
class Request:
    """One blob to fetch: from whom, which, at most (or, `exact`, exactly) how many bytes,
    within how long (None: the fetcher's `fetch_timeout_s`)."""

    peer: str
    key: str
    max_bytes: int
    exact: bool = False
    timeout: float | None = None


@dataclass(frozen=True)
class Outcome:
    """What one fetch gave: the bytes, or why not (a `TransportError`: the peer did not
    serve in time; a `RejectedMessage`: it announced a size it may not have)."""

    request: Request
    data: bytes | None = None
    error: TransportError | RejectedMessage | None = None
    # the peer took the fetch and sent nothing (not even a header) in `STALL_S` or more
    stalled: bool = False
    # it failed slowly (timed out, or took `SLOW_S` or more to fail): the round waited on it
    slow: bool = False


class Fetcher:
    """Runs batches of `Request`s side by side, each batch within a deadline."""

    def __init__(
        self,
        transport: Transport,
        parallel: int = 8,
        *,
        fetch_timeout_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.transport = transport
        self.fetch_timeout_s = fetch_timeout_s
        self.monotonic = monotonic
        inner = getattr(transport, "inner", transport)  # a `TopicTap` wraps the real one
        threaded = parallel > 1 and not isinstance(inner, MemoryTransport)
        self._pool = ThreadPoolExecutor(parallel, "pull-fetch") if threaded else None
        # fetches off the round (probes of peers not vouched for, views only heard)
        self._later = ThreadPoolExecutor(PROBES, "pull-probe") if threaded else None
        self.per_peer = FETCHES_PER_PEER

    @property
    def threaded(self) -> bool:
        """Whether fetches run side by side (and off the round) rather than in turn."""
        return self._pool is not None

    def later(self, request: Request) -> Future:
        """Start `request` off the round (threaded only); its `Outcome` when done."""
        assert self._later is not None, "in-memory transports fetch in turn"
        timeout = request.timeout or self.fetch_timeout_s
        return self._later.submit(self._one, request, self.monotonic() + timeout)

    def close(self) -> None:
        for pool in (self._pool, self._later):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def fetch_all(self, requests: Sequence[Request], deadline: float) -> list[Outcome]:
        """One `Outcome` per request, in order, all by `deadline` (a `monotonic` time)."""
        if self._pool is None:
            return [self._one(r, deadline) for r in requests]
        futures: dict[int, Future] = {}
        slots = {r.peer: threading.BoundedSemaphore(self.per_peer) for r in requests}
        for i in interleaved(requests):
            request = requests[i]
            futures[i] = self._pool.submit(self._limited, request, slots[request.peer], deadline)
        wait_all(futures.values(), timeout=max(0.0, deadline - self.monotonic()) + 1.0)
        return [
            f.result() if f.done() else Outcome(r, error=FetchTooSlow("past the round's deadline"))
            for f, r in ((futures[i], r) for i, r in enumerate(requests))
        ]

    def _limited(
        self, request: Request, slot: threading.BoundedSemaphore, deadline: float
    ) -> Outcome:
        """`_one` once fewer than `per_peer` fetches to its peer run (by `deadline`)."""
        if not slot.acquire(timeout=max(0.0, deadline - self.monotonic())):
            return Outcome(request, error=NoFetchSlot("no fetch slot for the peer in time"))
        try:
            return self._one(request, deadline)
        finally:
            slot.release()

    def _one(self, request: Request, deadline: float) -> Outcome:
        left = min(request.timeout or self.fetch_timeout_s, deadline - self.monotonic())
        if left <= 0:
            return Outcome(request, error=FetchTooSlow("the round's time budget is spent"))
        cap = SizeCap(request.max_bytes, request.exact)
        began = self.monotonic()
        try:
            data = self.transport.fetch_blob(
                request.peer, request.key, left, FetchLimits(check=cap)
            )
            cap.size(len(data))  # the bytes themselves, whatever the transport checked
        except (TransportError, RejectedMessage) as e:
            too_slow = isinstance(e, FetchTooSlow)
            ours = isinstance(e, NoFetchSlot)  # waited on this node's own fetches to the peer
            stalled = too_slow and not ours and not cap.answered and left >= STALL_S
            slow = too_slow or self.monotonic() - began >= SLOW_S
            return Outcome(request, error=e, stalled=stalled, slow=slow)
        return Outcome(request, data=data)


def interleaved(requests: Sequence[Request]) -> list[int]:
    """Indices of `requests`, one peer's in turn (first requests of each peer first)."""
    by_peer: dict[str, collections.deque[int]] = {}
    for i, request in enumerate(requests):
        by_peer.setdefault(request.peer, collections.deque()).append(i)
    order: list[int] = []
    queues = list(by_peer.values())
    while queues:
        order += [q.popleft() for q in queues]
        queues = [q for q in queues if q]
    return order
