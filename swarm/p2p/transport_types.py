"""The values that cross the transport seam (`swarm.p2p.transport.Transport`): inbound
messages and their validators, refusals and their reasons, peers, blobs served, the
transport's counters, and the limits and checks of a blob fetch.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

# A validator gets one inbound message and returns None to accept it or a short reason code
# to reject it. Transports wrap validators so an exception inside one counts as a rejection
# ("validator_error") instead of taking the host down.
Validator = Callable[["InboundMessage"], str | None]


@dataclass(frozen=True)
class InboundMessage:
    """One message as received: raw bytes plus what the transport knows of its origin."""

    topic: str
    data: bytes
    source: str  # peer ID of the sender as seen by the transport ("" if unknown)
    received_at: float


class RefusalReason(enum.StrEnum):
    """Why the transport itself refused something a peer sent (before any validator ran)."""

    OVERSIZE = "oversize_message"  # a gossip message (or RPC) above the size limit
    UNSIGNED = "unsigned_message"  # a gossip message without a signature
    BAD_SIGNATURE = "bad_message_signature"  # a signature that does not verify
    CONTROL_FLOOD = "gossip_control_flood"  # IHAVE/IWANT/GRAFT/PRUNE beyond the peer's budget
    BACKOFF_VIOLATION = "gossip_backoff_violation"  # GRAFT while we told it to back off
    BLOB_FETCH_LIMIT = "blob_fetch_limit"  # too many blob fetches at once from one peer
    FLOW_CONTROL = "flow_control_violation"  # bytes sent beyond our stream receive window
    INBOUND_BUDGET = "inbound_budget"  # more queued inbound messages than one peer may have
    LOW_SCORE = "below_publish_score"  # a message forwarded by a peer scored under the gate
    OVER_BUDGET = "over_cost_budget"  # past its cost budget: RPCs dropped unparsed, then banned
    BAD_AUTONAT_REQUEST = "bad_autonat_request"  # a malformed AutoNAT dial-back request
    BAD_HOLE_PUNCH = "bad_hole_punch"  # a malformed DCUtR (hole punching) message


class Reachability(enum.StrEnum):
    """Whether peers can dial this node (AutoNAT: `swarm.p2p.libp2p.reachability`)."""

    UNKNOWN = "unknown"  # not asked yet, or the answers disagree
    PUBLIC = "public"  # peers dialled it back
    PRIVATE = "private"  # peers failed to: behind NAT or a firewall


@dataclass(frozen=True)
class Refusal:
    """What the transport refused from one peer, for the node to record (ledger, bans).

    Floods are summarised: the transport reports each (peer, reason) at most once per
    second, with `count` events since its last report.
    """

    peer_id: str  # the peer that sent it to us (and that is penalised)
    reason: RefusalReason
    detail: str = ""
    count: int = 1
    source: str = ""  # the message's claimed origin, when a gossip message was refused
    topic: str = ""


RefusalHook = Callable[[Refusal], None]


@dataclass(frozen=True)
class PeerInfo:
    """A peer currently connected to this node."""

    peer_id: str
    addrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class BlobServed:
    """A blob this node served in full to a peer: what the ledger counts as a delta served."""

    peer_id: str
    key: str
    nbytes: int
    addrs: tuple[str, ...] = ()  # where the fetcher listens, as known when it fetched


@dataclass
class TransportStats:
    """Counters a transport keeps so that nothing is dropped silently."""

    published: int = 0
    received: int = 0
    inbox_dropped: int = 0  # accepted by the validator but evicted from a full inbox
    rejected: collections.Counter = field(default_factory=collections.Counter)  # reason -> n
    # Payload bytes (not counting the transport's own framing and control traffic): gossip
    # messages published and received (every one a validator saw), blobs served and fetched.
    gossip_bytes_out: int = 0
    gossip_bytes_in: int = 0
    blob_bytes_out: int = 0
    blob_bytes_in: int = 0

    def as_dict(self) -> dict:
        return {
            "published": self.published,
            "received": self.received,
            "inbox_dropped": self.inbox_dropped,
            "rejected": dict(self.rejected),
            "gossip_bytes_out": self.gossip_bytes_out,
            "gossip_bytes_in": self.gossip_bytes_in,
            "blob_bytes_out": self.blob_bytes_out,
            "blob_bytes_in": self.blob_bytes_in,
        }


class BlobCheck(Protocol):
    """Checks a blob while it arrives, so a bad one is refused before it is read in full.

    Both methods run on the transport's thread, like a validator: keep them cheap and
    thread-safe. Raising refuses the blob; the exception reaches `fetch_blob`'s caller.
    """

    def size(self, nbytes: int) -> None:
        """The length the serving peer announced, before any of the blob is read."""

    def head(self, data: bytes) -> int:
        """Given the blob's first bytes (b"" at first), how many first bytes to see in all:
        at most `len(data)` once satisfied. Called again after every read until then."""


@dataclass(frozen=True)
class FetchLimits:
    """Bounds on one `fetch_blob` beyond its total deadline."""

    min_rate: float = 0.0  # bytes/s the transfer must average once grace_s is over (0: none)
    grace_s: float = 5.0  # seconds from the start (dial, request, header) before the floor
    check: BlobCheck | None = None
