"""Private networks as the libp2p pnet spec (PSK v1) defines them: XSalsa20, 24-byte nonces.

Each side of a connection writes a fresh random 24-byte nonce before anything else, then
XORs everything it writes with the XSalsa20 key stream of (network key, its nonce); the
reader takes the other side's nonce and XORs with the matching stream. There is no other
handshake: with a wrong key, Noise on top fails. This is what go-libp2p, js-libp2p
(@libp2p/pnet) and rust-libp2p speak. py-libp2p 0.8.1 uses Salsa20 with an 8-byte nonce
instead (and reads its nonce with one unchecked read), so it talks to none of them;
patches/network.py puts `PnetConnection` in its place.

XSalsa20(k, n) is Salsa20 keyed with HSalsa20(k, n[:16]) and nonced with n[16:]. The
Salsa20 stream is pycryptodome's (already a py-libp2p dependency); HSalsa20 is libsodium's
`crypto_core_hsalsa20`, from the libsodium PyNaCl ships (or the system's), called once per
connection direction. PyNaCl's own bindings do not expose it.

A refused peer is named in the log, once per peer and reason (`note_refusal`), whether it
dialled this node or was dialled by it: every libp2p connection starts with the multistream
header, so a peer whose first bytes are that header in plain text has no swarm key, and one
whose first bytes do not decrypt to it has another key. Only logged: the connection then
fails on its own (Noise cannot complete), as it always did.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import functools
import hashlib
import logging
import os
import threading

import trio
from Crypto.Cipher import Salsa20
from libp2p.abc import IRawConnection

from swarm.core.errors import TransportError

NONCE_SIZE = 24
KEY_SIZE = 32
MULTISTREAM_HEADER = b"\x13/multistream/1.0.0\n"  # the first bytes of any libp2p connection
PLAIN_MATCH = 8  # bytes of that header, in plain text where a nonce should be: a peer without a key
NOTED_MAX = 1024  # (network, direction, peer, reason) remembered so that each is logged once
NO_KEY = "it has no swarm key (it spoke libp2p in plain text)"
OTHER_KEY = "it has another swarm key (its bytes do not decrypt to libp2p's first message)"

_log = logging.getLogger(__name__)
_noted: collections.OrderedDict[tuple[str, ...], None] = collections.OrderedDict()
_noted_lock = threading.Lock()


def note_refusal(network: str, dialled: bool, address: tuple[str, int] | None, reason: str) -> bool:
    """Log once per private network, peer and reason why a connection cannot work; returns
    whether it was logged now. A peer that dialled in is known by its host (its port changes
    with each connection), one this node dialled by host and port. `network` tells networks
    apart (a hash of the key, never the key)."""
    host, port = address if address else ("unknown address", 0)
    peer = host if dialled else f"{host}:{port}"
    key = (network, "dialled" if dialled else "dialling", peer, reason)
    with _noted_lock:
        if key in _noted:
            return False
        _noted[key] = None
        if len(_noted) > NOTED_MAX:
            _noted.popitem(last=False)
    if dialled:
        _log.warning("private network: refused a connection from %s: %s", peer, reason)
    else:
        _log.warning("private network: dialling %s failed: %s", peer, reason)
    return True


class XSalsa20:
    """One direction's XSalsa20 key stream; `xor` continues where the last call stopped."""

    def __init__(self, key: bytes, nonce: bytes) -> None:
        if len(key) != KEY_SIZE or len(nonce) != NONCE_SIZE:
            raise ValueError("XSalsa20 takes a 32-byte key and a 24-byte nonce")
        subkey = hsalsa20(key, nonce[:16])
        self._cipher = Salsa20.new(key=subkey, nonce=nonce[16:])

    def xor(self, data: bytes) -> bytes:
        return self._cipher.encrypt(data)


def hsalsa20(key: bytes, block: bytes) -> bytes:
    """libsodium's crypto_core_hsalsa20(block, key) with the standard constant: 32 bytes."""
    if len(key) != KEY_SIZE or len(block) != 16:
        raise ValueError("HSalsa20 takes a 32-byte key and a 16-byte input")
    out = ctypes.create_string_buffer(32)
    _libsodium().crypto_core_hsalsa20(out, block, key, None)
    return out.raw


@functools.cache
def _libsodium() -> ctypes.CDLL:
    """The libsodium PyNaCl bundles (it exports the C API), else the system's."""
    candidates: list[str] = []
    try:
        import nacl._sodium as bundled

        candidates.append(bundled.__file__)
    except ImportError:
        pass
    system = ctypes.util.find_library("sodium")
    if system:
        candidates.append(system)
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
            function = lib.crypto_core_hsalsa20
        except (OSError, AttributeError):
            continue
        function.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p]
        function.restype = ctypes.c_int
        return lib
    raise TransportError(
        "private networks need libsodium's crypto_core_hsalsa20 (from PyNaCl or the system's "
        "libsodium); none was found"
    )


class PnetConnection(IRawConnection):
    """A raw connection wrapped in pnet: nonce first, then XSalsa20 both ways."""

    def __init__(self, conn: IRawConnection, key: bytes) -> None:
        self._conn = conn
        self._key = key
        self.is_initiator = getattr(conn, "is_initiator", False)
        self._writer: XSalsa20 | None = None
        self._reader: XSalsa20 | None = None
        self._write_lock = trio.Lock()  # key stream order must equal byte order on the wire
        self._read_lock = trio.Lock()
        self._network = hashlib.sha256(b"swarm-node pnet log\0" + key).hexdigest()[:16]
        self._head = b""  # the first decrypted bytes, until they match the multistream header
        self._head_checked = False

    async def write(self, data: bytes) -> None:
        async with self._write_lock:
            if self._writer is None:
                nonce = os.urandom(NONCE_SIZE)
                self._writer = XSalsa20(self._key, nonce)
                await self._conn.write(nonce + self._writer.xor(data))
                return
            await self._conn.write(self._writer.xor(data))

    async def read(self, n: int | None = None) -> bytes:
        async with self._read_lock:
            if self._reader is None:
                nonce = await self._read_nonce()
                if nonce is None:
                    return b""
                self._reader = XSalsa20(self._key, nonce)
            data = await self._conn.read(n)
            plain = self._reader.xor(data) if data else b""
            if plain and not self._head_checked:
                self._check_head(plain)
            return plain

    def _check_head(self, plain: bytes) -> None:
        """Log a peer whose first decrypted bytes are not libp2p's first message (another key)."""
        self._head = (self._head + plain)[: len(MULTISTREAM_HEADER)]
        if not MULTISTREAM_HEADER.startswith(self._head):
            self._head_checked = True
            note_refusal(self._network, not self.is_initiator, self.get_remote_address(), OTHER_KEY)
        elif len(self._head) == len(MULTISTREAM_HEADER):
            self._head_checked = True

    async def _read_nonce(self) -> bytes | None:
        nonce = b""
        while len(nonce) < NONCE_SIZE:
            chunk = await self._conn.read(NONCE_SIZE - len(nonce))
            if not chunk:
                if nonce:
                    raise TransportError("private network: the connection ended inside the nonce")
                return None
            nonce += chunk
            shown = nonce[: len(MULTISTREAM_HEADER)]
            if len(shown) >= PLAIN_MATCH and MULTISTREAM_HEADER.startswith(shown):
                note_refusal(
                    self._network, not self.is_initiator, self.get_remote_address(), NO_KEY
                )
        return nonce

    async def close(self) -> None:
        await self._conn.close()

    def get_remote_address(self) -> tuple[str, int] | None:
        return self._conn.get_remote_address()

    def get_transport_addresses(self) -> list:
        getter = getattr(self._conn, "get_transport_addresses", None)
        return getter() if getter is not None else []

    def get_connection_type(self):  # noqa: ANN201 - the wrapped connection's own type
        return self._conn.get_connection_type()


def protect(conn: IRawConnection, psk: str) -> PnetConnection:
    """`conn` inside the private network of `psk` (64 hex characters)."""
    if len(psk) != 2 * KEY_SIZE:
        raise TransportError("a private-network key is 32 bytes (64 hex characters)")
    return PnetConnection(conn, bytes.fromhex(psk))
