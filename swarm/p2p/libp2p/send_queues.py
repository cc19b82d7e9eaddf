"""`SendQueues`: the health of the per-peer outbound gossip queues (patches.SwarmPubsub's).

Back-pressure reads them (`publish.Outbox`: how full the fullest queue that still drains is,
and when a waiting one turns stalled), and a watchdog tears down the connection of a peer
whose queue has stopped moving. Runs on the trio thread.
"""

from __future__ import annotations

import logging

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID

from swarm.p2p.libp2p.patches import SwarmPubsub, abort_peer_connections
from swarm.p2p.libp2p.refusals import RefusalRecorder
from swarm.p2p.libp2p.stats import Counters

logger = logging.getLogger(__name__)

# A peer whose outbound queue has not moved for this long gets its connection torn down.
# py-libp2p's Yamux answers pings and stream opens inline in its read loop, so when both
# directions of a connection are full the two read loops can wait on each other forever;
# a frozen or malicious peer that stops reading pins our queue the same way.
SEND_STALL_S = 10.0
# A queue whose send loop has not moved for this long no longer holds back publishing.
BACKPRESSURE_STALL_S = 2.0
WATCHDOG_INTERVAL_S = 1.0


class SendQueues:
    """The outbound queues of one pubsub: how full they are, and the stalled-peer watchdog."""

    def __init__(
        self, host: IHost, pubsub: SwarmPubsub, counters: Counters, rejections: RefusalRecorder
    ) -> None:
        self._host = host
        self._pubsub = pubsub
        self._counters = counters
        self._rejections = rejections

    def fullest_queue(self) -> int:
        """Length of the longest outbound queue that is still draining.

        A queue whose send loop has made no progress for BACKPRESSURE_STALL_S is left out:
        one frozen peer must not throttle publishing to everyone else (the watchdog drops
        it after SEND_STALL_S; what it misses meanwhile is counted as dropped).
        """
        now = trio.current_time()
        progress = self._pubsub.send_progress
        return max(
            (
                len(queue)
                for peer_id, queue in self._pubsub.peer_queues.items()
                if now - progress.get(peer_id, now) <= BACKPRESSURE_STALL_S
            ),
            default=0,
        )

    def pending_outbound(self) -> int:
        """RPCs waiting in all peers' outbound queues."""
        return sum(len(queue) for queue in self._pubsub.peer_queues.values())

    def next_stall_in(self) -> float:
        """Seconds until the next waiting queue counts as stalled (`fullest_queue` then leaves
        it out) if its send loop makes no progress meanwhile; inf when none waits."""
        now = trio.current_time()
        progress = self._pubsub.send_progress
        left = (
            progress.get(peer_id, now) + BACKPRESSURE_STALL_S - now
            for peer_id, queue in self._pubsub.peer_queues.items()
            if len(queue) > 0
        )
        # A millisecond past the mark, so that the queue is left out when the wait ends.
        return min((s + 0.001 for s in left if s >= 0), default=float("inf"))

    async def wait_for_sending(self, timeout: float) -> bool:
        """Until a peer's send loop writes a batch or ends, or the outbox hands one over, at
        most `timeout` seconds; whether something moved."""
        return await self._pubsub.sent.wait(timeout)

    def note_handed_over(self) -> None:
        """The outbox handed a message to pubsub: wake waits on the queues (trio thread)."""
        self._pubsub.sent.fire()

    async def watch_send_queues(self, nursery: trio.Nursery) -> None:
        """Tear down the connection of any peer whose outbound queue is stuck (see SEND_STALL_S)."""
        while True:
            await trio.sleep(WATCHDOG_INTERVAL_S)
            self._rejections.flush()  # summaries of refusals that waited their second
            now = trio.current_time()
            progress = self._pubsub.send_progress
            for peer_id in list(progress):
                queue = self._pubsub.peer_queues.get(peer_id)
                if queue is None:
                    progress.pop(peer_id, None)
                elif len(queue) > 0 and now - progress[peer_id] > SEND_STALL_S:
                    progress.pop(peer_id, None)
                    nursery.start_soon(self._abort_stalled, peer_id)

    async def _abort_stalled(self, peer_id: ID) -> None:
        logger.warning(
            "outbound queue to %s stuck for %.0f s; dropping its connection", peer_id, SEND_STALL_S
        )
        with self._counters.locked() as stats:
            stats.stalled_peers += 1
        await abort_peer_connections(self._host.get_network(), peer_id)
