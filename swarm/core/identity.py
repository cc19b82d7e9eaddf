"""A node's persistent Ed25519 identity, in the libp2p key format.

A node is known to the swarm by its libp2p peer ID (``12D3KooW...``). For Ed25519 keys the
peer ID is an *identity multihash* of the public key, so the public key can be read back
out of the peer ID itself. That is what lets the wire format bind a message to its sender:
the sender signs with the same key its libp2p host uses, and a receiver verifies the
signature against the public key embedded in the claimed peer ID, with no key exchange
and no lookup.

This module is for: creating an identity (random or from a 32-byte seed), saving it
(mode 0600, atomic replace) and loading it back (a file open to group or others is made
0600, with a warning, or refused when it cannot be), deriving the peer ID, and plain
sign / verify helpers over bytes.

It deliberately is not: a keystore (one key per file, no passphrase, no rotation), a
message format (callers decide exactly which bytes they sign, and should put a domain
tag in them), or a trust policy (a valid signature says who sent a message, not whether
to believe it).

File format: the libp2p protobuf ``PrivateKey`` (KeyType Ed25519, 32-byte seed), i.e. the
36-byte file `libp2p.identity_utils.save_identity` writes. Loading also accepts the
64-byte seed+public-key form that go-libp2p writes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
from pathlib import Path

from swarm.core.libp2p_parts import skip_unused_parts

skip_unused_parts()  # before the first libp2p import

from google.protobuf.message import DecodeError  # noqa: E402
from libp2p.crypto.ed25519 import Ed25519PrivateKey, Ed25519PublicKey  # noqa: E402
from libp2p.crypto.keys import KeyPair, KeyType, PrivateKey  # noqa: E402
from libp2p.peer.id import ID  # noqa: E402
from nacl.exceptions import CryptoError  # noqa: E402

from swarm.core.errors import TransportError  # noqa: E402

_log = logging.getLogger(__name__)
KEY_FILE_MODE = 0o600
SEED_SIZE = 32
SIGNATURE_SIZE = 64
# go-libp2p stores an Ed25519 private key as seed (32) + public key (32).
_GO_PRIVATE_KEY_SIZE = 64
# A key file is tiny (36 bytes); anything far larger is not a key file, so don't read it all.
_MAX_KEY_FILE_SIZE = 4096


class IdentityError(TransportError):
    """A node identity cannot be created, read, written or parsed. The message names the file."""


def create_identity(seed: bytes | None = None) -> KeyPair:
    """A new Ed25519 key pair: random, or deterministic from a 32-byte `seed` (tests, fixtures)."""
    if seed is not None and len(seed) != SEED_SIZE:
        raise IdentityError(f"an identity seed must be exactly {SEED_SIZE} bytes, got {len(seed)}")
    try:
        private_key = Ed25519PrivateKey.new(seed)
    except ValueError as exc:  # the library rejects seeds whose public key is not a valid point
        raise IdentityError(f"cannot create an identity from this seed: {exc}") from exc
    return KeyPair(private_key, private_key.get_public_key())


def peer_id_of(key_pair: KeyPair) -> str:
    """The peer ID string (``12D3KooW...``) of a key pair, as every libp2p node computes it."""
    return ID.from_pubkey(key_pair.public_key).to_base58()


def identity_exists(path: str | os.PathLike[str]) -> bool:
    """True if something exists at `path` (whether it is a valid key is for `load_identity`)."""
    return Path(path).exists()


def save_identity(key_pair: KeyPair, path: str | os.PathLike[str]) -> None:
    """Write `key_pair` to `path` with mode 0600, atomically (a crash leaves old or new, never half).

    The key goes to a temporary file in the same directory, created 0600 from the start so it
    is never readable by others, then is fsynced and renamed over `path`.
    """
    _write_identity(key_pair, Path(path), replace=True)


def save_new_identity(key_pair: KeyPair, path: str | os.PathLike[str]) -> None:
    """`save_identity`, but never over an existing file (an identity, once made, is for good)."""
    target = Path(path)
    try:
        _write_identity(key_pair, target, replace=False)
    except FileExistsError:
        raise IdentityError(
            f"identity file {target} already exists: refusing to overwrite it"
        ) from None


def _write_identity(key_pair: KeyPair, target: Path, replace: bool) -> None:
    if key_pair.private_key.get_type() != KeyType.Ed25519:
        raise IdentityError("only Ed25519 identities are supported")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write_private(target, key_pair.private_key.serialize(), replace)
    except FileExistsError:
        raise
    except OSError as exc:
        raise IdentityError(f"cannot write identity file {target}: {exc.strerror or exc}") from exc


def _atomic_write_private(target: Path, data: bytes, replace: bool) -> None:
    """Write via a fsynced temporary file, then rename it over `target` (`replace`) or hard-link
    it to `target`, which fails with FileExistsError if `target` appeared meanwhile."""
    # mkstemp creates the file with mode 0600 and O_EXCL, so no window with wider permissions.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), KEY_FILE_MODE)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if replace:
            os.replace(tmp_name, target)
        else:
            os.link(tmp_name, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
    _fsync_directory(target.parent)


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable; not every filesystem allows opening a directory.
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def load_identity(path: str | os.PathLike[str]) -> KeyPair:
    """Read a key pair saved by `save_identity` (or by go-libp2p). Raises `IdentityError`."""
    source = Path(path)
    try:
        with open(source, "rb") as handle:
            data = handle.read(_MAX_KEY_FILE_SIZE + 1)
    except FileNotFoundError:
        raise IdentityError(f"identity file {source} does not exist") from None
    except OSError as exc:
        raise IdentityError(f"cannot read identity file {source}: {exc.strerror or exc}") from exc
    make_private(source)
    if len(data) > _MAX_KEY_FILE_SIZE:
        raise IdentityError(f"identity file {source} is too large to be a key file")
    return _parse_private_key(data, source)


def make_private(source: Path) -> bool:
    """An identity file that group or others may read is made private (0600), with a warning
    that says so; one that cannot be is refused (`IdentityError`). Returns whether it changed.

    Whoever could read the file can sign as this node: the warning says to use a new identity
    if that may have happened."""
    if os.name != "posix":
        return False
    try:
        mode = stat.S_IMODE(source.stat().st_mode)
    except OSError:
        return False
    if not mode & 0o077:
        return False
    try:
        os.chmod(source, KEY_FILE_MODE)
    except OSError as exc:
        raise IdentityError(
            f"identity file {source} is open to group or others (mode {mode:04o}) and cannot be "
            f"made private ({exc.strerror or exc}): chmod 600 {source}"
        ) from None
    _log.warning(
        "identity file %s was open to group or others (mode %04o): made private (0600); whoever "
        "could read it can sign as this node: if that may have happened, use a new identity",
        source,
        mode,
    )
    return True


def _parse_private_key(data: bytes, source: Path) -> KeyPair:
    try:
        message = PrivateKey.deserialize_from_protobuf(data)
    except DecodeError as exc:
        raise IdentityError(f"identity file {source} is not a libp2p private key: {exc}") from exc
    if message.key_type != KeyType.Ed25519.value:
        raise IdentityError(
            f"identity file {source} holds a key of type {message.key_type}; only Ed25519 is supported"
        )
    raw = bytes(message.data)
    if len(raw) == _GO_PRIVATE_KEY_SIZE:
        seed, embedded_public = raw[:SEED_SIZE], raw[SEED_SIZE:]
    elif len(raw) == SEED_SIZE:
        seed, embedded_public = raw, None
    else:
        raise IdentityError(
            f"identity file {source} holds an Ed25519 key of {len(raw)} bytes, expected 32 or 64"
        )
    try:
        private_key = Ed25519PrivateKey.from_bytes(seed)
    except (ValueError, CryptoError) as exc:
        raise IdentityError(f"identity file {source} holds an invalid Ed25519 key: {exc}") from exc
    public_key = private_key.get_public_key()
    if embedded_public is not None and public_key.to_bytes() != embedded_public:
        raise IdentityError(
            f"identity file {source} is corrupt: its public key does not match its seed"
        )
    return KeyPair(private_key, public_key)


def load_or_create_identity(path: str | os.PathLike[str]) -> KeyPair:
    """Load the identity at `path`, creating and saving a new random one if there is none yet.

    Creating never replaces a file: if another process creates the identity first, this
    one loads and returns that, so two starts racing on one path agree on one peer ID.
    """
    target = Path(path)
    if identity_exists(target):
        return load_identity(target)
    key_pair = create_identity()
    try:
        _write_identity(key_pair, target, replace=False)
    except FileExistsError:
        return load_identity(target)
    return key_pair


def sign(key_pair: KeyPair, data: bytes) -> bytes:
    """The 64-byte Ed25519 signature of `data` by this identity."""
    return key_pair.private_key.sign(bytes(data))


def public_key_from_peer_id(peer_id: str) -> bytes:
    """The raw 32-byte Ed25519 public key embedded in an Ed25519 peer ID. Raises `IdentityError`.

    Only identity-multihash peer IDs (``12D3KooW...``) embed their key; hashed peer IDs
    (``Qm...``, used for RSA keys) do not, and are refused.
    """
    return _ed25519_public_key(peer_id).to_bytes()


def _ed25519_public_key(peer_id: str) -> Ed25519PublicKey:
    try:
        parsed = ID.from_base58(peer_id)
    except ValueError as exc:
        raise IdentityError(f"not a peer ID: {peer_id!r}") from exc
    public_key = parsed.extract_public_key()
    if not isinstance(public_key, Ed25519PublicKey):
        raise IdentityError(f"peer ID {peer_id!r} does not embed an Ed25519 public key")
    # Refuse non-canonical encodings, so one key cannot sign under two different peer ID strings.
    if ID.from_pubkey(public_key).to_base58() != peer_id:
        raise IdentityError(f"peer ID {peer_id!r} is not in canonical form")
    return public_key


def verify(peer_id: str, data: bytes, signature: bytes) -> bool:
    """True if `signature` is a valid signature of `data` by the key embedded in `peer_id`.

    Never raises for bad input: a malformed peer ID, a key type other than Ed25519 or a
    signature of the wrong length all simply do not verify.
    """
    if len(signature) != SIGNATURE_SIZE:
        return False
    try:
        public_key = _ed25519_public_key(peer_id)
        return public_key.verify(bytes(data), bytes(signature))
    except (IdentityError, ValueError, CryptoError):
        return False


def peer_id_from_public_key(public_key: bytes) -> str:
    """The peer ID string of a raw 32-byte Ed25519 public key."""
    if len(public_key) != SEED_SIZE:
        raise IdentityError(f"an Ed25519 public key is {SEED_SIZE} bytes, got {len(public_key)}")
    try:
        key = Ed25519PublicKey.from_bytes(bytes(public_key))
    except (ValueError, CryptoError) as exc:
        raise IdentityError(f"invalid Ed25519 public key: {exc}") from exc
    return ID.from_pubkey(key).to_base58()


__all__ = [
    "KEY_FILE_MODE",
    "IdentityError",
    "create_identity",
    "identity_exists",
    "load_identity",
    "load_or_create_identity",
    "peer_id_from_public_key",
    "peer_id_of",
    "public_key_from_peer_id",
    "save_identity",
    "save_new_identity",
    "sign",
    "verify",
]
