"""Every decoder of a peer's bytes answers any input with a value or a refusal, never another
exception: random bytes, nesting tens of thousands deep, lengths declared far beyond the
bytes that follow, and valid messages cut or flipped at random.

A refusal is `RejectedMessage` for the wire's messages (with a `Reason`), `DeltaError` for a
delta container, and an empty list for the hint lists (views, peer exchange, holder hints),
which are only hints.
"""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason
from swarm.p2p.libp2p.peer_exchange import parse_px_payload
from swarm.policy.delta.container import DeltaError, parse_container, peek_header
from swarm.sync.holders import decode_hints, encode_hints
from swarm.wire import (
    HolderHint,
    decode_announcement,
    decode_group,
    decode_manifest,
    decode_signed_group,
    stored_nonce,
    unpack_announcements,
    unpack_manifests,
    unpack_message,
)
from swarm.wire.streams import PeerEntry, ViewEntry, decode_peer_exchange, decode_view, encode_view

DEPTH = 30_000

# msgpack headers that declare a length of 2^32 - 1 (array, map, str, bin, ext) or a
# nesting that never ends, followed by a few bytes.
HUGE_HEADERS = [b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff"]
HUGE_HEADERS += [b"\xc6\xff\xff\xff\xff", b"\xc9\xff\xff\xff\xff\x01"]


def deep_msgpack(depth: int, kind: str) -> bytes:
    """A msgpack value nested `depth` deep: maps of one key, or arrays of one item."""
    opener = b"\x81\xa1a" if kind == "map" else b"\x91"
    return opener * depth + b"\xc0"


def deep_json(depth: int) -> bytes:
    return b'{"peers": ' + b"[" * depth + b"]" * depth + b"}"


REFUSING = {
    "decode_group": decode_group,
    "unpack_message": unpack_message,
    "decode_manifest": decode_manifest,
    "unpack_manifests": unpack_manifests,
    "decode_announcement": decode_announcement,
    "unpack_announcements": unpack_announcements,
    "decode_signed_group": decode_signed_group,
    "stored_nonce": stored_nonce,
}
HINTS = {
    "decode_view": decode_view,
    "decode_peer_exchange": decode_peer_exchange,
    "decode_hints": decode_hints,
    "parse_px_payload": parse_px_payload,
}
CONTAINER = {"parse_container": parse_container, "peek_header": peek_header}


def answer(name: str, data: bytes) -> object:
    """What the decoder `name` makes of `data`; fails the test on any other exception."""
    if name in REFUSING:
        try:
            return REFUSING[name](data)
        except RejectedMessage as e:
            assert isinstance(e.reason, Reason)
            return e
    if name in CONTAINER:
        try:
            return CONTAINER[name](data)
        except DeltaError as e:
            return e
    result = HINTS[name](data)
    assert isinstance(result, list)
    return result


ALL = sorted({**REFUSING, **HINTS, **CONTAINER})


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("kind", ["map", "array"])
def test_nesting_thirty_thousand_deep_is_refused(name: str, kind: str) -> None:
    result = answer(name, deep_msgpack(DEPTH, kind))
    assert isinstance(result, RejectedMessage | DeltaError) or result == []


@pytest.mark.parametrize("name", sorted(HINTS))
def test_json_nested_thirty_thousand_deep_gives_no_hints(name: str) -> None:
    assert answer(name, deep_json(DEPTH)) == []


@pytest.mark.parametrize("name", sorted(HINTS))
def test_json_numbers_of_thousands_of_digits_give_no_hints(name: str) -> None:
    data = b'{"peers": [{"id": ' + b"9" * 5000 + b', "addrs": []}]}'
    assert answer(name, data) == []


def envelopes() -> st.SearchStrategy[bytes]:
    """Valid outer shapes of every message, with any leaf values: close enough to pass the
    first checks, so the fuzzing reaches the later ones."""
    leaf = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**64 - 1),
        st.floats(allow_nan=True),
        st.text(max_size=20),
        st.binary(max_size=20),
    )
    value = st.recursive(
        leaf,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=12,
    )
    items = st.lists(st.tuples(st.binary(max_size=64), st.binary(max_size=64)), max_size=3)
    return st.one_of(
        st.builds(
            lambda v, kind, body: msgspec.msgpack.encode({"v": v, "kind": kind, **body}),
            st.integers(0, 4),
            st.sampled_from(["rollouts", "delta_manifests", "announcements", "x"]),
            st.fixed_dictionaries(
                {}, optional={"groups": items, "manifests": items, "items": items, "holders": value}
            ),
        ),
        st.builds(msgspec.msgpack.encode, value),
        st.builds(lambda v: json.dumps({"peers": v}, default=bytes.hex).encode(), value),
    )


def peer_bytes() -> st.SearchStrategy[bytes]:
    """Random bytes, valid-looking messages, and either with a huge length or deep nesting
    put in front, spliced in or cut short."""
    base = st.one_of(st.binary(max_size=512), envelopes(), st.just(_valid_hints()))
    prefix = st.one_of(
        st.sampled_from(HUGE_HEADERS),
        st.integers(1, 200).map(lambda d: deep_msgpack(d, "map")[:-1]),
        st.just(b""),
    )
    return st.builds(
        lambda p, b, cut: (p + b)[: cut if cut else None], prefix, base, st.integers(0, 600)
    )


def _valid_hints() -> bytes:
    return encode_hints([HolderHint("ab" * 32, "12D3KooWtest", ("/ip4/127.0.0.1/tcp/1",))])


@settings(max_examples=300, deadline=None)
@given(data=peer_bytes(), name=st.sampled_from(ALL))
def test_any_bytes_get_a_value_or_a_refusal(data: bytes, name: str) -> None:
    answer(name, data)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=64), at=st.integers(0, 63))
def test_views_and_hints_survive_flipped_bytes(data: bytes, at: int) -> None:
    """A served view or hint list with one byte replaced: entries or nothing, never an error."""
    view = encode_view([ViewEntry("12D3KooWx", ("/ip4/127.0.0.1/tcp/4001",), 0)])
    for valid in (view, _valid_hints()):
        i = at % len(valid)
        mutated = valid[:i] + data + valid[i + 1 :]
        answer("decode_view", mutated)
        answer("decode_hints", mutated)


def test_a_valid_view_and_peer_exchange_still_decode() -> None:
    """The refusals above do not come from refusing everything."""
    entry = ViewEntry("12D3KooWx", ("/ip4/127.0.0.1/tcp/4001",), 3)
    assert decode_view(encode_view([entry])) == [entry]
    px = json.dumps({"peers": [{"id": "x", "addrs": ["/ip4/1.2.3.4/tcp/1"]}]}).encode()
    assert decode_peer_exchange(px) == [PeerEntry("x", ("/ip4/1.2.3.4/tcp/1",))]
    assert decode_hints(_valid_hints())[0].peer_id == "12D3KooWtest"
    body = msgspec.msgpack.encode({"nonce": b"n" * 16, "other": 1})
    assert stored_nonce(body) == b"n" * 16
