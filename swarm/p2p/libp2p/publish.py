"""Publishing with back-pressure: the node thread queues, the trio thread sends when peers drain.

py-libp2p's `publish()` never waits: each peer's outbound queue takes what it can and
drops the rest silently (a burst of 100 delivered 16). Here `Outbox.put` (node thread)
only appends to a bounded, thread-safe hand-off queue; its task (trio thread) takes
messages in order and publishes each once every still-draining peer queue is below a
high-water mark, waiting a bounded time for it. A thread round trip per message (and the
GIL hand-off it needs) capped a node at a few hundred messages/s, hence the hand-off queue
and one wake-up per batch.
"""

from __future__ import annotations

import collections
import logging
import threading
import time

import trio

from swarm.core.errors import TransportError
from swarm.p2p.libp2p.gossip import Gossip
from swarm.p2p.libp2p.stats import Counters

logger = logging.getLogger(__name__)

PUBLISH_WAIT_S = 10.0  # back-pressure is bounded: after this, publish anyway and count it
# publish() waits while any peer queue holds more than this many RPCs...
QUEUE_HIGH_WATER = 256
# ...or more than this many bytes' worth of messages of the size being published.
QUEUE_BYTES_BUDGET = 32 * 1024 * 1024
# publish() hands messages to the network thread through this many slots (or bytes); it
# blocks, for at most publish_wait, while they are full.
OUTBOX_MESSAGES = 1024
OUTBOX_BYTES = 64 * 1024 * 1024


class Outbox:
    """The bounded FIFO between `publish()` and the network thread, and the task that drains it."""

    def __init__(self, counters: Counters, publish_wait: float) -> None:
        self._counters = counters
        self._publish_wait = publish_wait
        self._closed = False
        self._items: collections.deque[tuple[str, bytes]] = collections.deque()
        self._bytes = 0
        self._cond = threading.Condition()
        self._wake_scheduled = False
        self._event: trio.Event | None = None

    # ------------------------------------------------------------------ node thread

    def put(self, topic: str, payload: bytes, token: trio.lowlevel.TrioToken) -> None:
        """Queue one message, waiting (bounded) for room; wake the network thread once per batch."""
        with self._cond:
            self._wait_for_room(len(payload))
            self._items.append((topic, payload))
            self._bytes += len(payload)
            wake = not self._wake_scheduled
            self._wake_scheduled = True
        if wake:
            try:
                token.run_sync_soon(self._wake)
            except trio.RunFinishedError as exc:
                raise TransportError("the libp2p host has stopped") from exc

    def _wait_for_room(self, size: int) -> None:
        """Called with `_cond` held: wait, bounded, for a free slot and enough bytes."""
        deadline = time.monotonic() + self._publish_wait
        while self._items and (
            len(self._items) >= OUTBOX_MESSAGES or self._bytes + size > OUTBOX_BYTES
        ):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TransportError(
                    f"publish gave up after {self._publish_wait:.0f} s: peers are not draining "
                    f"({len(self._items)} messages still waiting to go out)"
                )
            if self._closed:
                raise TransportError("the libp2p host has stopped")
            self._cond.wait(remaining)  # woken by a message leaving, or by close()

    def close(self) -> None:
        """The network thread has ended: wake every put() waiting for room (it raises)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # ------------------------------------------------------------------ trio thread

    def start(self, nursery: trio.Nursery, gossip: Gossip) -> None:
        """Start publishing through `gossip`; from then on put() wakes the publishing task."""
        self._event = trio.Event()
        nursery.start_soon(self._run, gossip)

    async def _run(self, gossip: Gossip) -> None:
        """Forever: publish what put() queued, in order, each after back-pressure allows it."""
        while self._event is not None:
            await self._event.wait()
            self._event = trio.Event()
            while (item := self._peek()) is not None:
                topic, data = item
                await self._wait_for_queue_room(gossip, len(data))
                await self._publish_one(gossip, topic, data)
                self._pop()
                gossip.queues.note_handed_over()
                await trio.sleep(0)  # let the per-peer sending tasks run between messages

    async def flush(self, gossip: Gossip, timeout: float) -> bool:
        """Wait until everything published has left the outbox and every peer queue is empty."""
        deadline = trio.current_time() + timeout
        while self._items or gossip.queues.pending_outbound() > 0:
            left = deadline - trio.current_time()
            if left <= 0:
                return False
            await gossip.queues.wait_for_sending(left)  # woken by each batch written or handed over
        return True

    async def _publish_one(self, gossip: Gossip, topic: str, data: bytes) -> None:
        try:
            await gossip.publish(topic, data)
        except Exception as exc:  # noqa: BLE001 - library boundary: counted, never fatal
            logger.warning("publishing on %r failed: %r", topic, exc)
            self._counters.handler_error("publish", exc)
            with self._counters.locked() as stats:
                stats.publish_errors += 1
        else:
            with self._counters.locked() as stats:
                stats.published += 1
                stats.gossip_bytes_out += len(data)

    async def _wait_for_queue_room(self, gossip: Gossip, size: int) -> None:
        """Back-pressure: wait (bounded) until every peer's outbound queue is below high water."""
        limit = max(4, min(QUEUE_HIGH_WATER, QUEUE_BYTES_BUDGET // max(size, 1)))
        if gossip.queues.fullest_queue() <= limit:
            return
        deadline = trio.current_time() + self._publish_wait
        while gossip.queues.fullest_queue() > limit:
            left = deadline - trio.current_time()
            if left <= 0:
                with self._counters.locked() as stats:
                    stats.backpressure_timeouts += 1
                logger.warning(
                    "publish waited %.1f s for outbound queues (fullest: %d RPCs); sending anyway",
                    self._publish_wait,
                    gossip.queues.fullest_queue(),
                )
                return
            # Woken by each batch a send loop writes, or when a queue starts to count as stalled.
            await gossip.queues.wait_for_sending(min(left, gossip.queues.next_stall_in()))
        with self._counters.locked() as stats:
            stats.backpressure_waits += 1

    def _peek(self) -> tuple[str, bytes] | None:
        with self._cond:
            if not self._items:
                self._wake_scheduled = False  # the next put() must wake us again
                return None
            return self._items[0]

    def _pop(self) -> None:
        with self._cond:
            _, data = self._items.popleft()
            self._bytes -= len(data)
            self._cond.notify_all()

    def _wake(self) -> None:
        if self._event is not None:
            self._event.set()
