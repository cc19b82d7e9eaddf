"""What `swarm.p2p.libp2p.probe` finds about a dial, as plain values (no libp2p import), so
that the doctor's rules (`swarm.ops.network_checks`) read them without loading the transport."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Tcp(enum.Enum):
    """How the TCP part of a first exchange ended."""

    ANSWERED = "answered"  # connected, and the peer wrote something
    REFUSED = "refused"  # nothing listens there (the peer's or a router's TCP reset)
    TIMED_OUT = "timed_out"  # no answer to the connection request within the time
    SILENT = "silent"  # connected, but the peer wrote nothing within the time
    CLOSED = "closed"  # connected, and the peer closed without writing
    UNREACHABLE = "unreachable"  # no route, or another error of the connection request


@dataclass(frozen=True)
class FirstBytes:
    """What the first exchange at one address found: its TCP outcome, what the peer wrote
    (at most the nonce and the multistream header), the connection's setup time, the
    error's text, and this machine's own IP on the connection (where it connected)."""

    tcp: Tcp
    data: bytes = b""
    connect_s: float = 0.0
    detail: str = ""
    local_ip: str = ""


class KeyCheck(enum.Enum):
    """Whether the peer's first bytes are libp2p's under this node's swarm key."""

    SAME = "same"  # they are (or, with no key on either side, plain libp2p)
    PEER_HAS_NONE = "peer_has_none"  # this node has a key; the peer speaks plain libp2p
    OTHER_KEY = "other_key"  # this node has a key; the bytes do not decrypt to libp2p's
    NODE_HAS_NONE = "node_has_none"  # no key here; the bytes are not plain libp2p
    TOO_SHORT = "too_short"  # the peer wrote too little to tell


@dataclass(frozen=True)
class DialReport:
    """What a libp2p dial to a peer found.

    `error`: why the dial itself failed ("" if it connected). `kept`: whether the peer still
    held the connection after answering (a peer closes one from a peer off its allow-list,
    or banned, at once). `protocols`, `agent` and `observed` are from its Identify answer
    (empty without one); `observed` is the address it saw this node's connection come from.
    `px_error`: why its peer-exchange request failed ("" if it answered), `px_unsupported`
    whether it said it does not speak that protocol. `seconds`: the dial's time. `other_peer`:
    the peer that answered at the address instead of the one dialled (the handshake names
    it), where that was why the dial failed."""

    error: str = ""
    other_peer: str = ""
    kept: bool = False
    protocols: tuple[str, ...] = ()
    agent: str = ""
    observed: str = ""
    px_peers: int | None = None
    px_error: str = ""
    px_unsupported: bool = False
    seconds: float = 0.0
