"""The payloads of swarm-node's two stream protocols: peer exchange and blob fetches
(and the view of the swarm the pull exchange serves as a blob).

Both run on their own libp2p stream protocol (not gossip), one request per stream:

- peer exchange (`PEER_EXCHANGE_PROTOCOL`): the dialer sends nothing; the listener answers
  with one frame holding a JSON object {"peers": [{"id": ..., "addrs": [...]}, ...]}.
- blobs (`BLOB_PROTOCOL`): the dialer sends one frame holding the UTF-8 key; the listener
  answers with a `BLOB_RESPONSE` header (status, length) and, for `BlobStatus.OK`, exactly
  that many bytes.

A frame is a u32 big-endian length and that many bytes. The gossip messages are in
`swarm.wire.messages`; reading and writing the streams is the libp2p transport's.
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Iterable
from typing import Annotated

import msgspec
from msgspec import Struct

PEER_EXCHANGE_PROTOCOL = "/swarm/px/1.0.0"
BLOB_PROTOCOL = "/swarm/blob/1.0.0"
PX_MAX_PEERS = 64  # entries in one answer
PX_MAX_ADDRS = 4  # addresses per entry
PX_MAX_RESPONSE = 64 * 1024
MAX_BLOB_KEY_BYTES = 1024  # a request's key, UTF-8
# Blob fetches one peer may have running at once at a server; more are reset and recorded
# (`blob_fetch_limit`, billed to the peer's cost budget).
MAX_FETCHES_PER_PEER = 4
# Blob fetches a node opens at once to one peer: half the server's limit, so that fetches that
# ended on our side but not yet on the server's (it closes a stream after its last write) never
# push a new one over it. Both sides read these two: one shared limit.
FETCHES_PER_PEER = MAX_FETCHES_PER_PEER // 2
FRAME_LENGTH = struct.Struct(">I")  # a length-prefixed frame: u32 big-endian, then the bytes
BLOB_RESPONSE = struct.Struct(">BQ")  # status, then the blob's length (u64 big-endian)


class BlobStatus(enum.IntEnum):
    OK = 0
    MISSING = 1


class PeerEntry(Struct, frozen=True):
    """A peer a node is connected to: its peer ID and (up to four) dialable TCP multiaddrs."""

    id: str
    addrs: tuple[str, ...]


class PeerExchange(Struct, frozen=True):
    """A peer-exchange answer: {"peers": [{"id": ..., "addrs": [...]}, ...]} as JSON."""

    peers: tuple[PeerEntry, ...]


def encode_peer_exchange(peers: Iterable[PeerEntry]) -> bytes:
    """The JSON answer (Python's default separators) with at most PX_MAX_PEERS entries."""
    answer = PeerExchange(
        tuple(PeerEntry(p.id, tuple(p.addrs[:PX_MAX_ADDRS])) for p in peers)[:PX_MAX_PEERS]
    )
    return json.dumps(msgspec.to_builtins(answer)).encode()


def decode_peer_exchange(payload: bytes) -> list[PeerEntry]:
    """The well-formed entries of an answer (at most PX_MAX_PEERS, each with its first
    PX_MAX_ADDRS addresses). It is only a hint list: a bad entry is skipped, and an answer
    that is not a JSON object with a "peers" list gives none."""
    try:
        answer = json.loads(payload.decode("utf-8"))
    except (ValueError, RecursionError):  # not UTF-8 or JSON, an int of 4,300+ digits, nesting
        return []
    entries = answer.get("peers", []) if isinstance(answer, dict) else []
    found = []
    for entry in entries[:PX_MAX_PEERS] if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        peer_id, addrs = entry.get("id"), entry.get("addrs")
        if isinstance(peer_id, str) and isinstance(addrs, list):
            addrs = addrs[:PX_MAX_ADDRS]
            if all(isinstance(a, str) for a in addrs):
                found.append(PeerEntry(peer_id, tuple(addrs)))
    return found


# The pull exchange's view of the swarm (`swarm.exchange.peer_view`), served as a blob under
# `VIEW_KEY`: msgpack [[peer_id, [addr, ...], age], ...], the serving node's own entry first.
VIEW_KEY = "pull/view"
VIEW_MAX_ENTRIES = 65  # a view of 64 and the server itself
VIEW_MAX_BYTES = 64 * 1024


class ViewEntry(Struct, frozen=True, array_like=True):
    """A peer in a node's view: its ID, up to four TCP multiaddrs, and how many refreshes ago
    it was last heard of first-hand (0: the serving node itself, or a peer that just asked)."""

    id: Annotated[str, msgspec.Meta(max_length=128)]
    addrs: Annotated[
        tuple[Annotated[str, msgspec.Meta(max_length=256)], ...], msgspec.Meta(max_length=4)
    ]
    age: Annotated[int, msgspec.Meta(ge=0, le=2**31)]


_VIEW_DECODER = msgspec.msgpack.Decoder(
    Annotated[list[ViewEntry], msgspec.Meta(max_length=VIEW_MAX_ENTRIES)]
)


def encode_view(entries: Iterable[ViewEntry]) -> bytes:
    """A served view (at most VIEW_MAX_ENTRIES entries)."""
    return msgspec.msgpack.encode(list(entries)[:VIEW_MAX_ENTRIES])


def decode_view(data: bytes) -> list[ViewEntry]:
    """A peer's view; only a hint list, so a malformed or oversized one gives no entries."""
    if len(data) > VIEW_MAX_BYTES:
        return []
    try:
        return _VIEW_DECODER.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return []


def frame(payload: bytes) -> bytes:
    """A length-prefixed frame (the blob request, the peer-exchange answer)."""
    return FRAME_LENGTH.pack(len(payload)) + payload


def blob_request(key: str) -> bytes:
    """What a fetcher writes: the blob's key as one frame."""
    return frame(key.encode("utf-8"))


def blob_response_header(status: BlobStatus, size: int) -> bytes:
    """What a server writes before the blob's bytes (none for MISSING)."""
    return BLOB_RESPONSE.pack(status, size)


def parse_blob_response_header(header: bytes) -> tuple[int, int]:
    """(status, size) of a response header of BLOB_RESPONSE.size bytes."""
    return BLOB_RESPONSE.unpack(header)
