"""Private networks: XSalsa20 against known vectors, and swarm.key files in the pnet format."""

from __future__ import annotations

import hashlib
import logging
import stat

import nacl.bindings
import pytest

from swarm.core.errors import ConfigError, SwarmKeyError
from swarm.p2p import swarm_key
from swarm.p2p.libp2p import pnet

# NaCl's own XSalsa20 test (tests/stream.c, stream3.c): this key and nonce.
NACL_KEY = bytes.fromhex("1b27556473e985d462cd51197a9a46c76009549eac6474f206c4ee0844f68389")
NACL_NONCE = bytes.fromhex("69696ee955b62b73cd62bda875fc73d68219e0036b7a0b37")


def test_xsalsa20_matches_the_nacl_vectors() -> None:
    stream = pnet.XSalsa20(NACL_KEY, NACL_NONCE)
    first = stream.xor(bytes(32))
    assert first.hex() == "eea6a7251c1e72916d11c2cb214d3c252539121d8e234e652d651fa4c8cff880"
    rest = stream.xor(bytes(4194304 - 32))  # the stream continues across calls
    digest = hashlib.sha256(first + rest).hexdigest()
    assert digest == "662b9d0e3463029156069b12f918691a98f7dfb2ca0393c96bbfc6b1fbd630a2"


def test_xsalsa20_matches_libsodium_secretbox_key_stream() -> None:
    # secretbox XORs the message with XSalsa20's key stream from byte 32 on (after its MAC).
    key, nonce = bytes(range(32)), bytes(range(100, 124))
    box = nacl.bindings.crypto_secretbox(bytes(1000), nonce, key)
    stream = pnet.XSalsa20(key, nonce)
    stream.xor(bytes(32))
    assert stream.xor(bytes(1000)) == box[16:]


def test_xsalsa20_refuses_an_eight_byte_nonce() -> None:
    with pytest.raises(ValueError, match="24-byte nonce"):
        pnet.XSalsa20(NACL_KEY, NACL_NONCE[:8])


def test_a_key_file_is_written_in_the_pnet_format_and_read_back(tmp_path) -> None:
    key = swarm_key.generate_key()
    path = tmp_path / "swarm.key"
    swarm_key.write_key_file(path, key)
    lines = path.read_text().splitlines()
    assert lines == ["/key/swarm/psk/1.0.0/", "/base16/", key.hex()]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert swarm_key.read_key_file(path) == swarm_key.SwarmKey(key, legacy=False)


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
def test_every_spec_encoding_is_read(newline: bytes) -> None:
    key = bytes(range(32))
    head = b"/key/swarm/psk/1.0.0/" + newline
    assert (
        swarm_key.parse_key_text(head + b"/base16/" + newline + key.hex().upper().encode()).key
        == key
    )
    base64_text = head + b"/base64/" + newline + b"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
    assert swarm_key.parse_key_text(base64_text).key == key
    assert swarm_key.parse_key_text(head + b"/bin/" + newline + key).key == key


def test_the_old_bare_hex_file_is_read_with_one_warning(tmp_path, caplog) -> None:
    path = tmp_path / "swarm.key"
    path.write_text("AB" * 32 + "\n")
    with caplog.at_level(logging.WARNING):
        read = swarm_key.read_key_file(path)
    assert read == swarm_key.SwarmKey(bytes([0xAB]) * 32, legacy=True)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "\n" not in warnings[0].getMessage()


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (b"/key/swarm/psk/1.0.0/\n/base32/\nAAAA", "unknown .*encoding"),
        (b"/key/swarm/psk/1.0.0/\n/base16/\nabcd", "32 bytes, not 2"),
        (b"/key/swarm/psk/1.0.0/\n/base16/\nzz" + b"0" * 62, "not valid base16"),
        (b"/key/swarm/psk/2.0.0/\n/base16/\n" + b"00" * 32, "first line"),
        (b"0" * 63, "first line"),
    ],
)
def test_malformed_key_files_are_refused_with_a_clear_error(text: bytes, match: str) -> None:
    with pytest.raises(SwarmKeyError, match=match):
        swarm_key.parse_key_text(text)
    assert issubclass(SwarmKeyError, ConfigError)


def test_a_missing_key_file_is_a_swarm_key_error(tmp_path) -> None:
    with pytest.raises(SwarmKeyError, match="cannot read"):
        swarm_key.read_key_file(tmp_path / "absent.key")
