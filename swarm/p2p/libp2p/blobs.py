"""Blob streams (`/swarm/blob/1.0.0`): serve and fetch payloads too large for gossip.

py-libp2p's RequestResponse fails above about 7 MB, so blobs go over a raw stream: the
fetcher writes the key as one length-prefixed frame; the server answers with a header
(status byte, 8-byte length) and then the bytes, which the fetcher reads in a loop.
Every write and read is bounded in time, so a stalled peer ends its own exchange.
"""

from __future__ import annotations

import collections
import contextlib
import math
import threading
from collections.abc import AsyncIterator, Callable

import trio
from libp2p.abc import IHost, INetStream
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from swarm.core.errors import FetchTooSlow, TransportError
from swarm.p2p.libp2p.framing import (
    NET_ERRORS,
    STREAM_IO_TIMEOUT_S,
    StreamProtocolError,
    close_quietly,
    read_frame,
    reset_quietly,
)
from swarm.p2p.libp2p.host import AccessPolicy, peer_addrs
from swarm.p2p.libp2p.peer_costs import Cost
from swarm.p2p.libp2p.stats import Counters
from swarm.p2p.transport import BlobServed, FetchLimits, RefusalReason, ServedBlobLog
from swarm.wire import streams as wire_streams
from swarm.wire.streams import (
    BLOB_RESPONSE,
    BlobStatus,
    blob_request,
    blob_response_header,
    parse_blob_response_header,
)

# gossip.Gossip.refuse: count, record and penalise something refused from a peer.
Refuse = Callable[[ID, RefusalReason, str, None], None]

BLOB_PROTOCOL = TProtocol(wire_streams.BLOB_PROTOCOL)
# Served in pieces of this size: what one stalled fetch can pin beyond the blob itself (which
# is shared). It equals Yamux's initial stream window.
BLOB_CHUNK = 256 * 1024
# Fetches one peer may have running at once; more are reset, counted and recorded (a peer
# that opens many fetches and reads none pinned +350 MB before this limit). Our own fetches
# to one peer stay below it (`FetchSlots`, `wire_streams.FETCHES_PER_PEER`).
MAX_FETCHES_PER_PEER = wire_streams.MAX_FETCHES_PER_PEER
MAX_BLOB_KEY = wire_streams.MAX_BLOB_KEY_BYTES
DEFAULT_MAX_BLOB_SIZE = 1024 * 1024 * 1024


def check_blob_key(key: str) -> None:
    if len(key.encode("utf-8")) > MAX_BLOB_KEY:
        raise TransportError(f"a blob key is at most {MAX_BLOB_KEY} bytes")


class FetchSlots:
    """Our fetches to each peer at once, at most `per_peer` (network thread): an honest
    fetcher never opens more than a server accepts (`MAX_FETCHES_PER_PEER`), so it is never
    refused, nor billed for a refusal. A fetch waits for a slot within its own timeout."""

    def __init__(self, per_peer: int = wire_streams.FETCHES_PER_PEER) -> None:
        self.per_peer = per_peer
        self._slots: dict[ID, trio.Semaphore] = {}
        self._users: collections.Counter[ID] = collections.Counter()

    @contextlib.asynccontextmanager
    async def slot(self, peer_id: ID) -> AsyncIterator[None]:
        slots = self._slots.setdefault(peer_id, trio.Semaphore(self.per_peer))
        self._users[peer_id] += 1
        try:
            async with slots:
                yield
        finally:
            self._users[peer_id] -= 1
            if self._users[peer_id] <= 0:  # nobody holds or waits for one: forget the peer
                del self._users[peer_id]
                del self._slots[peer_id]


class BlobServer:
    """The blobs this node serves (filled from the node thread) and the handler serving them."""

    def __init__(self, policy: AccessPolicy, counters: Counters) -> None:
        self._policy = policy
        self._counters = counters
        self._blobs: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._served = ServedBlobLog()
        self._active: collections.Counter[ID] = collections.Counter()  # network thread only
        self._refuse: Refuse | None = None
        self._host: IHost | None = None
        self.on_use: Callable[[ID], None] = lambda peer_id: None  # a peer fetched from us

    def busy(self, peer_id: ID) -> bool:
        """Whether `peer_id` has a fetch from us running (network thread)."""
        return self._active.get(peer_id, 0) > 0

    def serve(self, key: str, data: bytes) -> None:
        check_blob_key(key)
        with self._lock:
            self._blobs[key] = bytes(data)

    def unserve(self, key: str) -> None:
        with self._lock:
            self._blobs.pop(key, None)

    def served(self, prefix: str = "") -> list[BlobServed]:
        """Blobs served in full since the last call (with keys starting with `prefix`)."""
        return self._served.drain(prefix)

    def register(self, host: IHost, refuse: Refuse) -> None:
        """Answer (allowed) peers' requests on `host` from now on; report refusals to `refuse`."""
        self._refuse = refuse
        self._host = host
        host.set_stream_handler(BLOB_PROTOCOL, self._handle_stream)

    async def _handle_stream(self, stream: INetStream) -> None:
        peer_id = stream.muxed_conn.peer_id
        self._policy.charge(peer_id, Cost.STREAM)
        if self._active[peer_id] >= MAX_FETCHES_PER_PEER:
            await self._refuse_fetch(stream, peer_id)
            return
        self._active[peer_id] += 1
        self.on_use(peer_id)
        try:
            await self._serve(stream, peer_id)
        finally:
            self._active[peer_id] -= 1
            if self._active[peer_id] <= 0:
                del self._active[peer_id]

    async def _refuse_fetch(self, stream: INetStream, peer_id: ID) -> None:
        with self._counters.locked() as stats:
            stats.blob_streams_refused += 1
        if self._refuse is not None:
            detail = f"more than {MAX_FETCHES_PER_PEER} blob fetches at once"
            self._refuse(peer_id, RefusalReason.BLOB_FETCH_LIMIT, detail, None)
        await reset_quietly(stream)

    async def _serve(self, stream: INetStream, peer_id: ID) -> None:
        """Serve one blob: read a length-prefixed key; answer with status, length, the bytes."""
        try:
            if not self._policy.allows(peer_id):
                await reset_quietly(stream)
                return
            with trio.fail_after(STREAM_IO_TIMEOUT_S):
                key = (await read_frame(stream, MAX_BLOB_KEY)).decode("utf-8")
            with self._lock:
                data = self._blobs.get(key)
            if data is None:
                with trio.fail_after(STREAM_IO_TIMEOUT_S):
                    await stream.write(blob_response_header(BlobStatus.MISSING, 0))
            else:
                await _write_chunked(stream, blob_response_header(BlobStatus.OK, len(data)), data)
                known = peer_addrs(self._host, peer_id)[:4] if self._host else []
                addrs = tuple(str(a).rsplit(f"/p2p/{peer_id}", 1)[0] for a in known)
                self._served.note(str(peer_id), key, len(data), addrs)
                with self._counters.locked() as stats:
                    stats.blob_bytes_out += len(data)
            await close_quietly(stream)
        except Exception as exc:  # noqa: BLE001 - a peer's request must never stop the host
            self._counters.handler_error("blob_serve", exc)
            await reset_quietly(stream)


async def fetch_blob(
    host: IHost,
    peer_id: ID,
    key: str,
    timeout: float,
    max_size: int,
    limits: FetchLimits | None = None,
) -> bytes:
    """Fetch blob `key` from `peer_id` within `timeout` s and `limits`; every failure is a
    `TransportError` (`FetchTooSlow` for time), or what `limits.check` raised."""
    reader = _Reader(limits or FetchLimits(), trio.current_time())
    try:
        with trio.fail_after(timeout):
            stream = await host.new_stream(peer_id, [BLOB_PROTOCOL])
            try:
                data = await _request(stream, peer_id, key, max_size, reader)
            except BaseException:
                await reset_quietly(stream)
                raise
            await close_quietly(stream)
            return data
    except trio.TooSlowError:
        raise FetchTooSlow(
            f"fetching blob {key!r} from {peer_id} timed out after {timeout} s"
            f" ({reader.got} bytes read)"
        ) from None
    except (*NET_ERRORS, StreamProtocolError) as exc:
        raise TransportError(f"fetching blob {key!r} from {peer_id} failed: {exc}") from exc


async def _request(
    stream: INetStream, peer_id: ID, key: str, max_size: int, reader: _Reader
) -> bytes:
    await stream.write(blob_request(key))
    status, size = parse_blob_response_header(await reader.read(stream, BLOB_RESPONSE.size))
    if status == BlobStatus.MISSING:
        raise TransportError(f"peer {peer_id} serves no blob {key!r}")
    if status != BlobStatus.OK or size > max_size:
        raise TransportError(
            f"peer {peer_id} answered blob {key!r} with status {status}, {size} bytes"
        )
    check = reader.limits.check
    head = b""
    if check is not None:  # refuse a bad blob by its announced size and first bytes
        check.size(size)
        need = check.head(head)
        while len(head) < min(need, size):
            head += await reader.read(stream, min(need, size) - len(head))
            need = check.head(head)
    return head + await reader.read(stream, size - len(head))


class _Reader:
    """Reads a fetch's bytes under its rate floor: once `grace_s` has passed, the bytes read
    must keep up with `min_rate` on average, or the fetch ends (`FetchTooSlow`)."""

    def __init__(self, limits: FetchLimits, started: float) -> None:
        self.limits = limits
        self.started = started
        self.got = 0

    def _deadline(self) -> float:
        if self.limits.min_rate <= 0:
            return math.inf
        return self.started + self.limits.grace_s + self.got / self.limits.min_rate

    async def read(self, stream: INetStream, size: int) -> bytes:
        """Exactly `size` bytes, looping over partial reads (a muxer hands out what it has)."""
        parts: list[bytes] = []
        left = size
        while left > 0:
            with trio.move_on_at(self._deadline()):
                try:
                    chunk = await stream.read(left)
                except EOFError:  # StreamEOF is an EOFError
                    chunk = b""
                if not chunk:
                    raise StreamProtocolError(f"stream ended after {size - left} of {size} bytes")
                parts.append(chunk)
                left -= len(chunk)
                self.got += len(chunk)
                continue
            elapsed = trio.current_time() - self.started
            raise FetchTooSlow(
                f"{self.got} bytes in {elapsed:.1f} s: below the floor of "
                f"{self.limits.min_rate:.0f} bytes/s after {self.limits.grace_s:g} s"
            )
        return b"".join(parts)


async def _write_chunked(stream: INetStream, header: bytes, data: bytes) -> None:
    """Write header then data in BLOB_CHUNK pieces, each bounded in time (a stalled reader
    ends it)."""
    view = memoryview(data)
    with trio.fail_after(STREAM_IO_TIMEOUT_S):
        await stream.write(header)
    for offset in range(0, len(data), BLOB_CHUNK):
        with trio.fail_after(STREAM_IO_TIMEOUT_S):
            chunk = view[offset : offset + BLOB_CHUNK]  # a view: no copy
            await stream.write(chunk)  # type: ignore[arg-type]  # a buffer is fine
