"""Private-network key files ("swarm.key") in the libp2p pnet format, and the old bare-hex form.

The libp2p private-network spec (pnet, PSK v1) stores the 32-byte network key as a
path-based multicodec text file, the same file go-libp2p, js-libp2p and IPFS read:

    /key/swarm/psk/1.0.0/
    /base16/
    <64 hex characters>

The second line names the encoding of the rest: `/base16/`, `/base64/` or `/bin/` (the
raw 32 bytes). Lines may end with CRLF. `format_key` writes `/base16/`; `parse_key_text`
reads all three, and also the bare 64-hex-character file that swarm-node wrote before it
followed the spec (with one warning line, so such a file keeps working).

Pure: no network, no libp2p; `read_key_file` / `write_key_file` are the only disk I/O.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from swarm.core.errors import SwarmKeyError

logger = logging.getLogger(__name__)

PSK_CODEC = b"/key/swarm/psk/1.0.0/"
KEY_SIZE = 32
KEY_FILE_MODE = 0o600
_HEX64 = re.compile(rb"^[0-9a-fA-F]{64}$")


@dataclass(frozen=True)
class SwarmKey:
    """A private-network key as read from a file; `legacy` if it was the old bare-hex form."""

    key: bytes  # 32 bytes
    legacy: bool = False

    @property
    def hex(self) -> str:
        return self.key.hex()


def generate_key() -> bytes:
    """A fresh random 32-byte network key."""
    return secrets.token_bytes(KEY_SIZE)


def format_key(key: bytes) -> bytes:
    """The spec's file content for `key`, base16-encoded (what every libp2p implementation reads)."""
    _check_size(key)
    return PSK_CODEC + b"\n/base16/\n" + key.hex().encode("ascii") + b"\n"


def parse_key_text(text: bytes) -> SwarmKey:
    """The key in a swarm.key file's bytes: the spec format, or the old bare hex (legacy)."""
    stripped = text.strip()
    if _HEX64.match(stripped):
        return SwarmKey(bytes.fromhex(stripped.decode("ascii")), legacy=True)
    header, sep, rest = text.partition(b"\n")
    if not sep or header.rstrip(b"\r") != PSK_CODEC:
        raise SwarmKeyError(
            f"not a private-network key: the first line must be {PSK_CODEC.decode()} "
            "(or the file must hold exactly 64 hex characters)"
        )
    encoding, sep, body = rest.partition(b"\n")
    if not sep:
        raise SwarmKeyError("private-network key file ends after its first line")
    return SwarmKey(_decode_body(encoding.rstrip(b"\r"), body))


def _decode_body(encoding: bytes, body: bytes) -> bytes:
    if encoding == b"/bin/":
        key = body[:KEY_SIZE] if len(body) > KEY_SIZE and not body[KEY_SIZE:].strip() else body
    elif encoding == b"/base16/":
        try:
            key = bytes.fromhex(body.strip().decode("ascii"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise SwarmKeyError(f"private-network key is not valid base16: {exc}") from None
    elif encoding == b"/base64/":
        try:
            key = base64.b64decode(body.strip(), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise SwarmKeyError(f"private-network key is not valid base64: {exc}") from None
    else:
        raise SwarmKeyError(
            f"unknown private-network key encoding {encoding!r}: use /base16/, /base64/ or /bin/"
        )
    _check_size(key)
    return key


def _check_size(key: bytes) -> None:
    if len(key) != KEY_SIZE:
        raise SwarmKeyError(f"a private-network key is {KEY_SIZE} bytes, not {len(key)}")


def read_key_file(path: str | os.PathLike[str]) -> SwarmKey:
    """Read a swarm.key file. The old bare-hex form is accepted with a one-line warning."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise SwarmKeyError(
            f"cannot read private-network key {path}: {exc.strerror or exc}"
        ) from None
    try:
        swarm_key = parse_key_text(text)
    except SwarmKeyError as exc:
        raise SwarmKeyError(f"{path}: {exc}") from None
    if swarm_key.legacy:
        logger.warning(
            "%s holds a bare hex key (old swarm-node format); it still works, but other libp2p "
            "implementations expect the pnet format: rewrite it with write_key_file",
            path,
        )
    return swarm_key


def write_key_file(path: str | os.PathLike[str], key: bytes) -> None:
    """Write `key` in the spec format, mode 0600, replacing any file atomically."""
    content = format_key(key)
    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
            os.chmod(tmp, KEY_FILE_MODE)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise SwarmKeyError(
            f"cannot write private-network key {path}: {exc.strerror or exc}"
        ) from None
