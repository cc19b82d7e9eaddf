"""A per-peer bound on gossip messages received and not yet processed (on the trio thread).

py-libp2p starts one task per received message (signature check, validators, delivery,
forwarding) and never limits how many: a peer that sends faster than we process makes
every one of its messages wait in memory at once. With this budget, the read loop of a
peer that has too much in flight waits before reading more, so the muxer's flow control
stops that peer's sending, and only that peer's.
"""

from __future__ import annotations

import trio
from libp2p.peer.id import ID

INBOUND_MESSAGES_PER_PEER = 256
INBOUND_BYTES_PER_PEER = 16 * 1024 * 1024


class InboundBudget:
    """Messages and bytes in flight per peer; `acquire` waits while a peer is over its budget.

    A single message larger than the byte budget is admitted when nothing else from that
    peer is in flight, so no message size can wedge a peer for good.
    """

    def __init__(
        self,
        max_messages: int = INBOUND_MESSAGES_PER_PEER,
        max_bytes: int = INBOUND_BYTES_PER_PEER,
    ) -> None:
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._in_flight: dict[ID, tuple[int, int]] = {}
        self._released: dict[ID, trio.Event] = {}

    def in_flight(self, peer_id: ID) -> tuple[int, int]:
        """(messages, bytes) from `peer_id` being processed now."""
        return self._in_flight.get(peer_id, (0, 0))

    async def acquire(self, peer_id: ID, nbytes: int) -> None:
        while True:
            count, used = self.in_flight(peer_id)
            if count == 0 or (count < self._max_messages and used + nbytes <= self._max_bytes):
                break
            event = self._released.setdefault(peer_id, trio.Event())
            await event.wait()
        self._in_flight[peer_id] = (count + 1, used + nbytes)

    def release(self, peer_id: ID, nbytes: int) -> None:
        count, used = self.in_flight(peer_id)
        if count <= 1:
            self._in_flight.pop(peer_id, None)
        else:
            self._in_flight[peer_id] = (count - 1, max(0, used - nbytes))
        event = self._released.pop(peer_id, None)
        if event is not None:
            event.set()
