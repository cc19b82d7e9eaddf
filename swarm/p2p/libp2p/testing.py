"""Tools for tests that play a hostile peer: hand-made gossip RPCs and raw streams.

A node never needs these. Adversary tests use them, with a real `Libp2pTransport` as the
attacker's host, to send what an honest node never would: oversize or unsigned messages,
control floods, blob requests that are never read, writes past the flow-control window.

- `signed_message` / `unsigned_message` build gossip messages the way Pubsub signs them
  (the "libp2p-pubsub:" prefix over the serialized message without key and signature).
- `rpc_frame` turns an RPC into the varint-prefixed bytes of a pubsub stream.
- `RawStream` (from `Libp2pTransport.open_raw_stream`) is one stream driven from the
  caller's thread: write, read, close, reset.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING

import multiaddr
import trio
from libp2p.abc import INetStream
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from libp2p.peer.peerstore import create_signed_peer_record
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX
from libp2p.utils.varint import encode_uvarint

from swarm.core.errors import TransportError
from swarm.p2p.libp2p.framing import NET_ERRORS, close_quietly, reset_quietly
from swarm.p2p.libp2p.patches import ignore_flow_control

if TYPE_CHECKING:
    from swarm.p2p.libp2p.network_thread import NetworkThread

_SEQNO = itertools.count(time.time_ns())


def unsigned_message(key_pair: KeyPair, topic: str, data: bytes) -> rpc_pb2.Message:
    """A gossip message from `key_pair`'s peer, with a fresh sequence number and no signature."""
    return rpc_pb2.Message(
        data=data,
        topicIDs=[topic],
        from_id=ID.from_pubkey(key_pair.public_key).to_bytes(),
        seqno=next(_SEQNO).to_bytes(8, "big"),
    )


def signed_message(key_pair: KeyPair, topic: str, data: bytes) -> rpc_pb2.Message:
    """A gossip message signed by `key_pair`, exactly as Pubsub signs its own publishes."""
    msg = unsigned_message(key_pair, topic, data)
    msg.signature = key_pair.private_key.sign(
        PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString()
    )
    msg.key = key_pair.public_key.serialize()
    return msg


def message_id(msg: rpc_pb2.Message) -> bytes:
    """The gossip message ID every node computes: origin peer ID bytes, then sequence number."""
    return msg.from_id + msg.seqno


def signed_peer_record(key_pair: KeyPair, addrs: list[str]) -> bytes:
    """A signed peer record (the envelope PRUNE peer exchange carries) for `key_pair`'s peer."""
    peer_id = ID.from_pubkey(key_pair.public_key)
    envelope = create_signed_peer_record(
        peer_id, [multiaddr.Multiaddr(a) for a in addrs], key_pair.private_key
    )
    return envelope.marshal_envelope()


def rpc_frame(rpc: rpc_pb2.RPC) -> bytes:
    """An RPC as it travels on a pubsub stream: uvarint length, then the protobuf."""
    body = rpc.SerializeToString()
    return encode_uvarint(len(body)) + body


class RawStream:
    """One libp2p stream, used from the caller's (non-network) thread. Every call is bounded."""

    def __init__(self, thread: NetworkThread, stream: INetStream) -> None:
        self._thread = thread
        self._stream = stream

    def write(self, data: bytes, *, ignore_window: bool = False, timeout: float = 10.0) -> None:
        """Write `data`; with `ignore_window`, past the receiver's flow-control window too."""
        self._thread.call(self._write, bytes(data), ignore_window, timeout)

    def read(self, max_bytes: int = 65536, timeout: float = 5.0) -> bytes:
        """Up to `max_bytes` (b"" at end of stream or when `timeout` passes first)."""
        return self._thread.call(self._read, max_bytes, timeout)

    def close(self) -> None:
        self._thread.call(close_quietly, self._stream)

    def reset(self) -> None:
        self._thread.call(reset_quietly, self._stream)

    async def _write(self, data: bytes, ignore_window: bool, timeout: float) -> None:
        try:
            with trio.fail_after(timeout):
                if ignore_window:
                    ignore_flow_control(self._stream)
                await self._stream.write(data)
        except NET_ERRORS as exc:
            raise TransportError(f"raw stream write failed: {exc}") from exc

    async def _read(self, max_bytes: int, timeout: float) -> bytes:
        with trio.move_on_after(timeout):
            try:
                return await self._stream.read(max_bytes)
            except EOFError:
                return b""
            except NET_ERRORS as exc:
                raise TransportError(f"raw stream read failed: {exc}") from exc
        return b""
