"""Diagnosing a dial, step by step, for `swarm-node doctor --network`: which step failed.

A node's own dialer (`connections.py`) only knows that a dial failed. The doctor needs the
step: no TCP connection (refused, timed out, unreachable), a connection on which the peer
says nothing, a peer with another swarm key, a peer that closes a connection whose
handshake succeeded (its allow-list, or a ban), a peer that speaks other versions of
swarm-node's protocols.

- `first_bytes` (blocking, any thread): a TCP connection to the address; it writes what a
  libp2p dialer writes first (the multistream header, inside the private network when
  there is a key: `pnet.py`), reads what the peer writes first, and closes. Every libp2p
  listener writes the multistream header at once, so its first bytes tell whether it
  speaks libp2p with this node's key, in plain text (no key), or neither.
- `key_check` (pure): that verdict from the bytes.
- `DiagnosticTransport.dial_report`: a real libp2p dial (Noise checks the peer ID), then
  Identify (the protocols the peer speaks, the address it sees this node at) and one
  peer-exchange request, then whether the peer kept the connection.

Nothing here retries. `first_bytes` closes its connection; a dial's connection stays open
until the transport closes (AutoNAT and fetches run on it).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import socket
import time

import multiaddr
import trio
from google.protobuf.message import DecodeError
from libp2p.custom_types import TProtocol
from libp2p.identity.identify.identify import ID as IDENTIFY_PROTOCOL
from libp2p.identity.identify.pb.identify_pb2 import Identify
from libp2p.peer.id import ID
from libp2p.utils.varint import decode_varint_with_size

from swarm.core.errors import TransportError
from swarm.p2p.libp2p import host as hosting
from swarm.p2p.libp2p.framing import (
    close_quietly,
    read_frame,
)
from swarm.p2p.libp2p.patches import is_protocol_not_supported, lift_dial_block
from swarm.p2p.libp2p.pnet import MULTISTREAM_HEADER, NONCE_SIZE, PLAIN_MATCH, XSalsa20
from swarm.p2p.libp2p.transport import Libp2pTransport
from swarm.p2p.probe_types import DialReport, FirstBytes, KeyCheck, Tcp
from swarm.wire.streams import PEER_EXCHANGE_PROTOCOL, PX_MAX_RESPONSE, decode_peer_exchange

MAX_IDENTIFY_BYTES = 64 * 1024
KEPT_GRACE_S = 0.5  # how long after its answers a peer must still hold the connection


# ------------------------------------------------------------------ the first bytes


def opening(psk: str | None) -> bytes:
    """What a libp2p dialer writes first: the multistream header, inside the private
    network of `psk` (a fresh nonce, then the header's XSalsa20 ciphertext) when there is one."""
    if psk is None:
        return MULTISTREAM_HEADER
    nonce = os.urandom(NONCE_SIZE)
    return nonce + XSalsa20(bytes.fromhex(psk), nonce).xor(MULTISTREAM_HEADER)


def first_bytes(
    host: str, port: int, psk: str | None, timeout: float, family: int | None = None
) -> FirstBytes:
    """Connect to `host`:`port` (an IP, or a name resolved in `family`) within `timeout` s,
    write `opening(psk)`, read what the peer writes first (within `timeout` s more), close.
    Never raises for the network's sake."""
    if family is None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
    began = time.monotonic()
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect((host, port))
        except TimeoutError:
            return FirstBytes(Tcp.TIMED_OUT, detail=f"no answer within {timeout:g} s")
        except ConnectionRefusedError:
            return FirstBytes(Tcp.REFUSED, detail="connection refused")
        except OSError as exc:
            return FirstBytes(Tcp.UNREACHABLE, detail=exc.strerror or str(exc))
        first = _exchange(sock, psk, timeout, time.monotonic() - began)
        return dataclasses.replace(first, local_ip=str(sock.getsockname()[0]))


def _exchange(sock: socket.socket, psk: str | None, timeout: float, connect_s: float) -> FirstBytes:
    wanted = len(MULTISTREAM_HEADER) + (NONCE_SIZE if psk is not None else 0)
    data = b""
    deadline = time.monotonic() + timeout
    try:
        sock.sendall(opening(psk))
        while len(data) < wanted:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            chunk = sock.recv(wanted - len(data))
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        pass
    except OSError as exc:  # a reset: the peer closed on what we wrote
        if not data and exc.errno in (errno.ECONNRESET, errno.EPIPE):
            return FirstBytes(Tcp.CLOSED, connect_s=connect_s, detail="connection reset")
        if not data:
            return FirstBytes(Tcp.UNREACHABLE, connect_s=connect_s, detail=exc.strerror or "")
    if data:
        return FirstBytes(Tcp.ANSWERED, data, connect_s)
    if time.monotonic() >= deadline:
        return FirstBytes(Tcp.SILENT, connect_s=connect_s, detail=f"nothing within {timeout:g} s")
    return FirstBytes(Tcp.CLOSED, connect_s=connect_s, detail="closed without a word")


def key_check(data: bytes, psk: str | None) -> KeyCheck:
    """The verdict on a peer's first bytes (`FirstBytes.data`), with this node's `psk`."""
    plain = data[: len(MULTISTREAM_HEADER)]
    looks_plain = len(plain) >= PLAIN_MATCH and MULTISTREAM_HEADER.startswith(plain)
    if psk is None:
        if looks_plain:
            return KeyCheck.SAME
        return KeyCheck.NODE_HAS_NONE if len(data) >= PLAIN_MATCH else KeyCheck.TOO_SHORT
    if looks_plain:
        return KeyCheck.PEER_HAS_NONE
    if len(data) < NONCE_SIZE + PLAIN_MATCH:
        return KeyCheck.TOO_SHORT
    decrypted = XSalsa20(bytes.fromhex(psk), data[:NONCE_SIZE]).xor(data[NONCE_SIZE:])
    return KeyCheck.SAME if MULTISTREAM_HEADER.startswith(decrypted) else KeyCheck.OTHER_KEY


# ------------------------------------------------------------------ the libp2p dial


class DiagnosticTransport(Libp2pTransport):
    """A `Libp2pTransport` that also reports on dials (`dial_report`) and on its AutoNAT
    client's answers (`autonat_answers`), for the doctor."""

    def dial_report(self, peer_id: str, addr: str, timeout: float) -> DialReport:
        """Dial `peer_id` at `addr` (within `timeout` s), ask it Identify and peer exchange,
        and report; the connection stays open (for AutoNAT and fetches) until `close()`."""
        try:
            target = ID.from_base58(peer_id)
            where = multiaddr.Multiaddr(addr)
        except (ValueError, TypeError, multiaddr.exceptions.Error) as exc:
            raise TransportError(f"not a peer address: {addr!r} ({exc})") from exc
        return self._thread.call(_dial_report, self._runtime.running().host, target, where, timeout)

    def autonat_answers(self) -> dict[str, bool]:
        """Each asked peer's latest AutoNAT answer (True: it dialled this node back)."""
        net = self._runtime.net
        return dict(net.autonat.answers) if net is not None else {}


async def _dial_report(host, peer_id: ID, addr: multiaddr.Multiaddr, timeout: float) -> DialReport:
    began = trio.current_time()
    lift_dial_block(host.get_network(), peer_id)
    try:
        with trio.fail_after(timeout):
            conn = await host.get_network().dial_addr(addr, peer_id)
            started = getattr(conn, "event_started", None)
            if started is not None:
                await started.wait()
    except trio.TooSlowError:
        return DialReport(error=f"no libp2p handshake within {timeout:g} s")
    except Exception as exc:  # noqa: BLE001 - library boundary: any dial error is reported
        return DialReport(error=_error_text(exc), other_peer=_other_peer(exc))
    seconds = trio.current_time() - began
    identify = await _identify(host, peer_id, timeout)
    px_peers, px_error, unsupported = await _peer_exchange(host, peer_id, timeout)
    await trio.sleep(KEPT_GRACE_S)
    return DialReport(
        kept=hosting.is_connected(host, peer_id),
        protocols=tuple(identify.protocols) if identify else (),
        agent=identify.agent_version if identify else "",
        observed=_observed(identify),
        px_peers=px_peers,
        px_error=px_error,
        px_unsupported=unsupported,
        seconds=seconds,
    )


async def _identify(host, peer_id: ID, timeout: float) -> Identify | None:
    """The peer's Identify message, or None when it gives none."""
    stream = None
    data = b""
    try:
        with trio.fail_after(timeout):
            stream = await host.new_stream(peer_id, [IDENTIFY_PROTOCOL])
            while len(data) < MAX_IDENTIFY_BYTES:
                chunk = await stream.read(MAX_IDENTIFY_BYTES - len(data))
                if not chunk:
                    break
                data += chunk
    except EOFError:
        pass
    except Exception:  # noqa: BLE001 - library boundary: no answer is the answer
        return None
    finally:
        if stream is not None:
            await close_quietly(stream)
    return parse_identify(data)


def parse_identify(data: bytes) -> Identify | None:
    """An Identify message, varint-length-prefixed (the spec) or bare (older peers)."""
    if not data:
        return None
    message = Identify()
    try:
        size, used = decode_varint_with_size(data)
        message.ParseFromString(data[used : used + size] if used + size == len(data) else data)
    except (DecodeError, ValueError, IndexError):
        return None
    return message


async def _peer_exchange(host, peer_id: ID, timeout: float) -> tuple[int | None, str, bool]:
    """(peers in the answer, why there is none, whether the protocol is not spoken)."""
    stream = None
    try:
        with trio.fail_after(timeout):
            stream = await host.new_stream(peer_id, [TProtocol(PEER_EXCHANGE_PROTOCOL)])
            payload = await read_frame(stream, PX_MAX_RESPONSE)
        return len(decode_peer_exchange(payload)), "", False
    except Exception as exc:  # noqa: BLE001 - library boundary: reported
        return None, _error_text(exc), is_protocol_not_supported(exc)
    finally:
        if stream is not None:
            await close_quietly(stream)


def _observed(identify: Identify | None) -> str:
    if identify is None or not identify.observed_addr:
        return ""
    try:
        return str(multiaddr.Multiaddr(identify.observed_addr))
    except (ValueError, TypeError, multiaddr.exceptions.Error):
        return ""


def _error_text(exc: BaseException) -> str:
    """One line: the exception and its causes, each as its type and text."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 4:
        text = " ".join(str(seen).split())[:200]
        parts.append(f"{type(seen).__name__}: {text}" if text else type(seen).__name__)
        seen = seen.__cause__ or seen.__context__
    return " <- ".join(parts)


def _other_peer(exc: BaseException) -> str:
    """The peer ID that answered instead, where the handshake failed on it (Noise found
    another peer at the address); "" otherwise."""
    seen: BaseException | None = exc
    while seen is not None:
        if type(seen).__name__ == "PeerIDMismatchesPubkey":
            found = re.search(r"remote_peer_id_from_pubkey=(\w+)", str(seen))
            return found.group(1) if found else ""
        seen = seen.__cause__ or seen.__context__
    return ""
