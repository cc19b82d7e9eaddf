"""Yamux's changes: `SwarmYamux` cuts off a peer writing past its receive window; and, for
adversary tests, a stream that ignores the window.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable

import libp2p.stream_muxer.muxer_multistream as libp2p_muxer_multistream
from libp2p.abc import INetStream
from libp2p.peer.id import ID
from libp2p.stream_muxer.yamux.yamux import DEFAULT_WINDOW_SIZE, MAX_WINDOW_SIZE, Yamux

logger = logging.getLogger(__name__)


def ignore_flow_control(stream: INetStream) -> None:
    """For adversary tests only: let `stream` write past the receiver's Yamux window.

    An honest muxer stops at the window the receiver granted; a hostile one does not.
    Yamux streams keep what they may still send in `send_window` (there is no setter).
    """
    muxed = getattr(stream, "muxed_stream", stream)
    if hasattr(muxed, "send_window"):
        muxed.send_window = 1 << 40


# A stream may hold this much beyond the receive window it granted before the peer is cut off.
FLOW_SLACK = 64 * 1024


class _BoundedBuffer(bytearray):
    """One Yamux stream's receive buffer, refusing bytes beyond the window the peer was given."""

    def __init__(self, conn: SwarmYamux, stream_id: int) -> None:
        super().__init__()
        self._conn = conn
        self._stream_id = stream_id

    def extend(self, data) -> None:  # noqa: ANN001 - bytes-like, as bytearray.extend takes
        limit = self._conn.buffer_limit(self._stream_id)
        if len(self) + len(data) > limit:
            self._conn.flow_control_violated(len(self) + len(data), limit)
            return
        super().extend(data)


class _BoundedBuffers(dict):
    """`Yamux.stream_buffers` replacement: every buffer stored in it is a `_BoundedBuffer`."""

    def __init__(self, conn: SwarmYamux) -> None:
        super().__init__()
        self._conn = conn

    def __setitem__(self, stream_id: int, value: bytearray) -> None:
        buffer = _BoundedBuffer(self._conn, stream_id)
        bytearray.extend(buffer, value)
        super().__setitem__(stream_id, buffer)


class SwarmYamux(Yamux):
    """Yamux that cuts off a peer writing past the receive window it was granted.

    Fixes: the library logs "peer exceeded receive window" and buffers the bytes anyway,
    without limit. A blob fetcher that kept writing while our handler was busy sending
    made the server buffer +1.0 GB. Now a stream's buffer holds at most its window plus
    FLOW_SLACK; beyond that the bytes are dropped and `on_flow_violation(peer)` is called
    once per connection (the transport counts it and closes the connection).
    py-libp2p's muxer negotiation constructs `Yamux` by its module-level name whatever
    class the host was given, so `use_bounded_yamux` replaces that name; the callback is
    looked up by the connection's local peer ID (one per transport in this process).
    """

    def __init__(self, secured_conn, peer_id: ID, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        super().__init__(secured_conn, peer_id, *args, **kwargs)
        self.stream_buffers = _BoundedBuffers(self)
        self._violated = False
        handler = _FLOW_HANDLERS.get(secured_conn.get_local_peer())
        self.on_flow_violation = handler() if handler is not None else None

    def buffer_limit(self, stream_id: int) -> int:
        stream = self.streams.get(stream_id)
        window = stream.target_recv_window if stream is not None else MAX_WINDOW_SIZE
        return max(window, DEFAULT_WINDOW_SIZE) + FLOW_SLACK

    def flow_control_violated(self, buffered: int, limit: int) -> None:
        if self._violated:
            return
        self._violated = True
        logger.warning(
            "peer %s wrote past its flow-control window (%d > %d bytes); closing",
            self.peer_id,
            buffered,
            limit,
        )
        if self.on_flow_violation is not None:
            self.on_flow_violation(self.peer_id)


# local peer ID -> weak reference to the transport method told about flow-control violations
_FLOW_HANDLERS: dict[ID, weakref.WeakMethod] = {}


def use_bounded_yamux(local_id: ID, on_flow_violation: Callable[[ID], None]) -> None:
    """Make every Yamux connection a `SwarmYamux`; tell `on_flow_violation` about `local_id`'s."""
    _FLOW_HANDLERS[local_id] = weakref.WeakMethod(on_flow_violation)
    libp2p_muxer_multistream.Yamux = SwarmYamux  # type: ignore[misc]  # a patch
