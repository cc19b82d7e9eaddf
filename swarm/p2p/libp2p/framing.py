"""Length-prefixed framing for our own stream protocols (blobs, peer exchange), on the trio thread.

A muxed stream hands out whatever bytes it has, so every read loops until it has the size
it asked for; every frame is a 4-byte big-endian length and the payload. Closing or
resetting a stream that already failed is best effort and bounded in time.
"""

from __future__ import annotations

import trio
from libp2p.abc import INetStream
from libp2p.exceptions import BaseLibp2pError

from swarm.wire.streams import FRAME_LENGTH, frame  # noqa: F401 - frame is re-exported

# Library errors we expect on the network (closed streams, failed dials, timeouts, bad data).
NET_ERRORS = (BaseLibp2pError, OSError, trio.TooSlowError, trio.BrokenResourceError, ValueError)

# Bound on each read or write of one of our streams: a stalled peer ends its own exchange.
STREAM_IO_TIMEOUT_S = 10.0


class StreamProtocolError(Exception):
    """The remote end of one of our stream protocols sent something malformed or stopped early."""


async def read_exactly(stream: INetStream, size: int) -> bytes:
    """Read exactly `size` bytes, looping over partial reads (a muxer hands out what it has)."""
    buffer = bytearray()
    while len(buffer) < size:
        try:
            chunk = await stream.read(size - len(buffer))
        except EOFError:  # StreamEOF is an EOFError
            chunk = b""
        if not chunk:
            raise StreamProtocolError(f"stream ended after {len(buffer)} of {size} bytes")
        buffer += chunk
    return bytes(buffer)


async def read_frame(stream: INetStream, max_size: int) -> bytes:
    """Read one length-prefixed frame of at most `max_size` payload bytes."""
    (size,) = FRAME_LENGTH.unpack(await read_exactly(stream, FRAME_LENGTH.size))
    if size > max_size:
        raise StreamProtocolError(f"frame of {size} bytes exceeds the limit of {max_size}")
    return await read_exactly(stream, size)


async def read_uvarint(stream: INetStream) -> int | None:
    """A protobuf-style unsigned varint (at most 10 bytes); None if the stream ended before it."""
    value = 0
    for index in range(10):
        try:
            byte = await stream.read(1)
        except EOFError:
            byte = b""
        if not byte:
            if index == 0:
                return None
            raise StreamProtocolError("stream ended inside a varint length")
        value |= (byte[0] & 0x7F) << (7 * index)
        if not byte[0] & 0x80:
            return value
    raise StreamProtocolError("varint length longer than 64 bits")


async def discard_exactly(stream: INetStream, size: int, chunk: int = 256 * 1024) -> None:
    """Read and drop `size` bytes, holding at most `chunk` of them at a time."""
    left = size
    while left > 0:
        try:
            data = await stream.read(min(chunk, left))
        except EOFError:
            data = b""
        if not data:
            raise StreamProtocolError(f"stream ended after {size - left} of {size} bytes")
        left -= len(data)


async def reset_quietly(stream: INetStream) -> None:
    """Reset a stream that already failed; its own error is what gets reported."""
    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
        try:
            await stream.reset()
        except NET_ERRORS:
            pass


async def close_quietly(stream: INetStream) -> None:
    """Close a stream whose exchange is over, bounded in time, ignoring network errors."""
    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
        try:
            await stream.close()
        except NET_ERRORS:
            pass
