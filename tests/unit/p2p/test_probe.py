"""The byte-level parts of the dial probe (`swarm.p2p.libp2p.probe`): a peer's first bytes
under a swarm key, and Identify's two encodings. Real peers: test_doctor_network.py."""

from __future__ import annotations

import os

from libp2p.identity.identify.pb.identify_pb2 import Identify
from libp2p.utils.varint import encode_varint_prefixed

from swarm.p2p.libp2p.pnet import MULTISTREAM_HEADER
from swarm.p2p.libp2p.probe import key_check, opening, parse_identify
from swarm.p2p.probe_types import KeyCheck

KEY = "ab" * 32
OTHER = "cd" * 32


def test_a_listener_with_the_same_key_or_none_on_both_sides_matches() -> None:
    assert key_check(opening(KEY), KEY) is KeyCheck.SAME
    assert key_check(opening(None), None) is KeyCheck.SAME


def test_a_key_on_one_side_only_or_another_key_is_named() -> None:
    assert key_check(opening(OTHER), KEY) is KeyCheck.OTHER_KEY
    assert key_check(MULTISTREAM_HEADER, KEY) is KeyCheck.PEER_HAS_NONE
    assert key_check(opening(KEY), None) is KeyCheck.NODE_HAS_NONE
    assert key_check(b"\x13/mu", KEY) is KeyCheck.TOO_SHORT
    assert key_check(os.urandom(3), None) is KeyCheck.TOO_SHORT


def test_each_opening_has_a_fresh_nonce() -> None:
    assert opening(KEY) != opening(KEY)
    assert opening(None) == MULTISTREAM_HEADER


def test_identify_reads_with_and_without_its_length_prefix() -> None:
    message = Identify(agent_version="py-libp2p/0.8.1", protocols=["/swarm/px/1.0.0"])
    body = message.SerializeToString()
    for data in (encode_varint_prefixed(body), body):
        parsed = parse_identify(data)
        assert parsed is not None and list(parsed.protocols) == ["/swarm/px/1.0.0"]
    assert parse_identify(b"") is None
