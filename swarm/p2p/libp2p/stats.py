"""The libp2p transport's counters: one thread-safe place that every part counts into."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from swarm.p2p.transport import TransportStats

logger = logging.getLogger(__name__)


@dataclass
class Libp2pStats(TransportStats):
    """`TransportStats` plus the libp2p-specific counters that show where anything was lost."""

    outbound_dropped: int = 0  # RPCs a full per-peer queue refused
    outbound_discarded: int = 0  # RPCs still queued for a peer when its stream died
    backpressure_waits: int = 0  # publishes that had to wait for queues to drain
    backpressure_timeouts: int = 0  # publishes that gave up waiting and went out anyway
    publish_errors: int = 0  # queued messages the library failed to publish
    dial_failures: int = 0
    refused_peers: int = 0  # connections closed because the peer is not on the allow-list
    stalled_peers: int = 0  # connections torn down because their outbound queue was stuck
    handler_errors: collections.Counter = field(default_factory=collections.Counter)  # where -> n
    # What the transport refused from peers by itself, by RefusalReason value.
    peer_refusals: collections.Counter = field(default_factory=collections.Counter)
    iwant_served_bytes: int = 0  # message bytes sent in answer to peers' IWANTs
    iwant_refused: int = 0  # IWANT message IDs not answered (repeat or over budget)
    ihave_ignored: int = 0  # IHAVE message IDs ignored (over budget, unknown topic, low score)
    control_refused: int = 0  # control entries of RPCs whose control part was ignored whole
    graylisted_rpcs: int = 0  # RPCs dropped unparsed: their sender was past its cost budget
    cost_bans: int = 0  # peers disconnected and banned for their costs (`peer_costs`)
    px_ignored: int = 0  # PRUNE peer-exchange entries not used (low score, unsigned, too many)
    blob_streams_refused: int = 0  # blob fetches refused: over the per-peer limit
    flow_control_violations: int = 0  # connections closed: peer wrote past our window
    connections_trimmed: int = 0  # idle connections closed to stay under max_connections
    dial_backs: int = 0  # AutoNAT: new connections opened to check that a peer is reachable
    hole_punch_dials: int = 0  # hole punching: direct connections our punch dials opened
    # hole punching: upgrades of relayed connections we started, by `holepunch.Outcome`
    hole_punches: collections.Counter = field(default_factory=collections.Counter)

    def as_dict(self) -> dict:
        base = super().as_dict()
        base.update(
            outbound_dropped=self.outbound_dropped,
            outbound_discarded=self.outbound_discarded,
            backpressure_waits=self.backpressure_waits,
            backpressure_timeouts=self.backpressure_timeouts,
            publish_errors=self.publish_errors,
            dial_failures=self.dial_failures,
            refused_peers=self.refused_peers,
            stalled_peers=self.stalled_peers,
            handler_errors=dict(self.handler_errors),
            peer_refusals=dict(self.peer_refusals),
            iwant_served_bytes=self.iwant_served_bytes,
            iwant_refused=self.iwant_refused,
            ihave_ignored=self.ihave_ignored,
            control_refused=self.control_refused,
            graylisted_rpcs=self.graylisted_rpcs,
            cost_bans=self.cost_bans,
            px_ignored=self.px_ignored,
            blob_streams_refused=self.blob_streams_refused,
            flow_control_violations=self.flow_control_violations,
            connections_trimmed=self.connections_trimmed,
            dial_backs=self.dial_backs,
            hole_punch_dials=self.hole_punch_dials,
            hole_punches=dict(self.hole_punches),
        )
        return base


class Counters:
    """The live `Libp2pStats` of one transport, behind a lock (the node thread reads it)."""

    def __init__(self) -> None:
        self._stats = Libp2pStats()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def locked(self) -> Iterator[Libp2pStats]:
        """The live counters, for the duration of a `with` block: `stats.published += 1`."""
        with self._lock:
            yield self._stats

    def handler_error(self, where: str, exc: BaseException) -> None:
        """Count an error contained in one of our handlers, by place and exception type."""
        logger.debug("%s: %s: %s", where, type(exc).__name__, exc)
        with self._lock:
            self._stats.handler_errors[f"{where}:{type(exc).__name__}"] += 1

    def snapshot(self, inbox_dropped: int) -> Libp2pStats:
        """A consistent copy of the counters (not a live view)."""
        with self._lock:
            snapshot = dataclasses.replace(self._stats)
            snapshot.rejected = collections.Counter(self._stats.rejected)
            snapshot.handler_errors = collections.Counter(self._stats.handler_errors)
            snapshot.peer_refusals = collections.Counter(self._stats.peer_refusals)
            snapshot.hole_punches = collections.Counter(self._stats.hole_punches)
        snapshot.inbox_dropped = inbox_dropped
        return snapshot
