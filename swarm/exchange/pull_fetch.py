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

A round need not wait a whole fetch timeout on a peer that has left. With `cut`, a batch
stops waiting on a fetch whose peer has sent no answer (not even the response header) within
its patience (`swarm.exchange.answer_times`: a timeout from the peer's measured answers,
as TCP's from its round trips): that fetch's `Outcome` carries the running fetch (`late`),
which goes on to its own timeout and is judged when it ends, like any other. Every answered
fetch is a sample of its peer's answer time, but one begun while another fetch of this node
to that peer ran (it may have waited behind this node's own fetches for a slot: one that
queued 5 s behind two stalled fetches made a stalling peer's patience 4.8 s).

In-memory transports answer at once from the same thread, so they are fetched in turn.

Deliberately not here: what a failed or refused fetch means (`swarm.exchange.pull`).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from dataclasses import dataclass

from swarm.core.errors import FetchTooSlow, NoFetchSlot, RejectedMessage, TransportError
from swarm.core.reasons import Reason
from swarm.exchange.answer_times import AnswerTimes, batch_patience
from swarm.p2p.transport import FetchLimits, MemoryTransport, Transport
from swarm.wire.streams import FETCHES_PER_PEER

PROBES = 32  # fetches off the round at once (views and lists, `swarm.exchange.pull_later`)
POLL_S = 0.005  # a batch that cuts waits looks at least this far apart
WAKE_S = 0.05  # ... and at most this far apart while some of its fetches have not gone out


STALL_S = 2.0  # a fetch given this long that got no answer at all is a stall, not a slow link
SLOW_S = 0.5  # a fetch that took this long to fail cost the round time (a refusal is quick)


class SizeCap:
    """A `BlobCheck` that refuses a blob by its announced length: above `max_bytes`, or, when
    `exact`, other than `max_bytes` (a group must be exactly the announced size). It also
    notes whether the peer answered at all (`answered`: its response header arrived), and
    when (`answered_at`, by `clock`)."""

    def __init__(
        self, max_bytes: int, exact: bool = False, clock: Callable[[], float] = time.monotonic
    ):
        self.max_bytes = max_bytes
        self.exact = exact
        self.clock = clock
        self.answered = False
        self.answered_at = 0.0
        self.began_at: float | None = None  # when the fetch went out (by the fetcher's clock)

    def size(self, nbytes: int) -> None:
        if not self.answered:
            self.answered_at = self.clock()
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
    # the batch stopped waiting on it (`cut`: no answer within its peer's patience): the fetch
    # runs on, and this future gives its `Outcome` when it ends
    late: Future | None = None


class Fetcher:
    """Runs batches of `Request`s side by side, each batch within a deadline."""

    def __init__(
        self,
        transport: Transport,
        parallel: int = 8,
        *,
        fetch_timeout_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
        answers: AnswerTimes | None = None,
    ):
        self.transport = transport
        self.fetch_timeout_s = fetch_timeout_s
        self.monotonic = monotonic
        self.answers = answers or AnswerTimes()  # each peer's measured answer times
        self._lock = threading.Lock()
        self._fetching: collections.Counter[str] = collections.Counter()  # running, by peer
        inner = getattr(transport, "inner", transport)  # a `TopicTap` wraps the real one
        threaded = parallel > 1 and not isinstance(inner, MemoryTransport)
        # twice `parallel` workers: fetches a round stopped waiting on may hold some a while
        self._pool = ThreadPoolExecutor(2 * parallel, "pull-fetch") if threaded else None
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

    def fetch_all(
        self, requests: Sequence[Request], deadline: float, *, cut: bool = False
    ) -> list[Outcome]:
        """One `Outcome` per request, in order, all by `deadline` (a `monotonic` time).
        With `cut` (threaded only), a fetch whose peer has not answered within its patience
        (`AnswerTimes.patience`, or the batch's if shorter: `batch_patience`) from when it
        went out (not while it waited for a worker or behind this node's other fetches to
        the peer) is waited on no more: its `Outcome` carries it, running, as `late`."""
        if self._pool is None:
            return [self._one(r, deadline) for r in requests]
        futures: dict[int, Future] = {}
        caps = [self._cap(r) for r in requests]
        slots = {r.peer: threading.BoundedSemaphore(self.per_peer) for r in requests}
        for i in interleaved(requests):
            request = requests[i]
            futures[i] = self._pool.submit(
                self._limited, request, slots[request.peer], deadline, caps[i]
            )
        # how long each fetch is waited for once it went out, if its peer does not answer
        timeouts = [r.timeout or self.fetch_timeout_s for r in requests]
        patience = [
            self.answers.patience(r.peer, t) if cut else None
            for r, t in zip(requests, timeouts, strict=True)
        ]

        def give_up(i: int) -> float:
            began, wait = caps[i].began_at, patience[i]
            if began is None or wait is None or caps[i].answered:
                return float("inf")
            wait = wait if batch is None else min(wait, batch)
            # no shorter than the fetch's own timeout: it ends by itself then (cut at the
            # same moment, a loaded machine could see it still running and call it late)
            return float("inf") if wait >= timeouts[i] else began + wait

        while True:
            now = self.monotonic()
            answered = [
                c.answered_at - c.began_at for c in caps if c.answered and c.began_at is not None
            ]
            batch = batch_patience(answered, len(requests), self.answers.floor)
            waited = [i for i, f in futures.items() if not f.done() and now < give_up(i)]
            if not waited or now >= deadline + 1.0:
                break
            until = min([deadline + 1.0] + [give_up(i) for i in waited])
            if cut and any(caps[i].began_at is None for i in waited):
                until = min(until, now + WAKE_S)  # to see when those go out
            wait_all(
                [futures[i] for i in waited],
                timeout=max(until - now, POLL_S),
                return_when=FIRST_COMPLETED,
            )
        return [self._outcome(r, futures[i], deadline) for i, r in enumerate(requests)]

    def _outcome(self, request: Request, future: Future, deadline: float) -> Outcome:
        if future.done():
            return future.result()
        if self.monotonic() < deadline:  # given up on before the deadline: it runs on
            return Outcome(request, late=future)
        return Outcome(request, error=FetchTooSlow("past the round's deadline"))

    def _cap(self, request: Request) -> SizeCap:
        return SizeCap(request.max_bytes, request.exact, self.monotonic)

    def _limited(
        self,
        request: Request,
        slot: threading.BoundedSemaphore,
        deadline: float,
        cap: SizeCap | None = None,
    ) -> Outcome:
        """`_one` once fewer than `per_peer` fetches to its peer run (by `deadline`)."""
        if not slot.acquire(timeout=max(0.0, deadline - self.monotonic())):
            return Outcome(request, error=NoFetchSlot("no fetch slot for the peer in time"))
        try:
            return self._one(request, deadline, cap)
        finally:
            slot.release()

    def _one(self, request: Request, deadline: float, cap: SizeCap | None = None) -> Outcome:
        left = min(request.timeout or self.fetch_timeout_s, deadline - self.monotonic())
        if left <= 0:
            return Outcome(request, error=FetchTooSlow("the round's time budget is spent"))
        cap = cap or self._cap(request)
        began = cap.began_at = self.monotonic()
        with self._lock:  # alone: no other fetch to the peer it might wait behind
            alone = not self._fetching[request.peer]
            self._fetching[request.peer] += 1
        try:
            try:
                data = self.transport.fetch_blob(
                    request.peer, request.key, left, FetchLimits(check=cap)
                )
                cap.size(len(data))  # the bytes themselves, whatever the transport checked
            finally:
                self._done_with(
                    request.peer, cap.answered_at - began if cap.answered else None, alone
                )
        except (TransportError, RejectedMessage) as e:
            too_slow = isinstance(e, FetchTooSlow)
            ours = isinstance(e, NoFetchSlot)  # waited on this node's own fetches to the peer
            stalled = too_slow and not ours and not cap.answered and left >= STALL_S
            slow = too_slow or self.monotonic() - began >= SLOW_S
            return Outcome(request, error=e, stalled=stalled, slow=slow)
        return Outcome(request, data=data)

    def _done_with(self, peer: str, answered_s: float | None, alone: bool) -> None:
        """A fetch to `peer` ended; if the peer answered it, and no other fetch of this node
        to the peer ran when it began (it waited on none of them: the transport holds
        `per_peer` at once), the time it took is a sample of the peer's answer time."""
        with self._lock:
            self._fetching[peer] -= 1
            if not self._fetching[peer]:
                del self._fetching[peer]
        if answered_s is not None and alone:
            self.answers.note(peer, answered_s)


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
