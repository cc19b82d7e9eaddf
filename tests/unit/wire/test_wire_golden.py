"""Wire bytes do not change: golden messages written by an earlier encoder decode to their
recorded fields and re-encode to exactly the same bytes (see tests/data/wire/generate.py)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from swarm.tasks import TaskSpec
from swarm.wire import (
    DeltaManifest,
    RolloutGroup,
    Sampling,
    SignedGroup,
    SignedManifest,
    decode_group,
    decode_manifest,
    encode_group,
    encode_manifest,
    pack_manifests,
    pack_messages,
    unpack_manifests,
    unpack_message,
)
from swarm.wire.signing import verify_manifest, verify_signed
from swarm.wire.streams import (
    BlobStatus,
    PeerEntry,
    blob_request,
    blob_response_header,
    decode_peer_exchange,
    encode_peer_exchange,
    parse_blob_response_header,
)

DATA = Path(__file__).parents[2] / "data" / "wire"
EXPECTED = json.loads((DATA / "expected.json").read_text(encoding="utf-8"))
GROUPS = ["group_small", "group_wide"]
MANIFESTS = ["manifest_delta", "manifest_anchor"]


def read(name: str) -> bytes:
    return (DATA / name).read_bytes()


def fields(value) -> dict:
    """A decoded struct as the generator recorded it: attribute names, bytes as {"hex": ...}."""

    def plain(v):
        if isinstance(v, bytes):
            return {"hex": v.hex()}
        if isinstance(v, msgspec.Struct):
            return {f.name: plain(getattr(v, f.name)) for f in msgspec.structs.fields(v)}
        if isinstance(v, tuple | list):
            return [plain(x) for x in v]
        return v

    out = plain(value)
    out.pop("v", None)  # the schema version is checked on its own
    return out


def group_from(recorded: dict) -> RolloutGroup:
    """The group the generator encoded, rebuilt from its recorded fields."""
    plain = {k: v for k, v in recorded.items() if k not in ("task", "sampling", "nonce")}
    tuples = {
        k: tuple(tuple(x) if isinstance(x, list) else x for x in v)
        for k, v in plain.items()
        if isinstance(v, list)
    }
    return RolloutGroup(
        **(plain | tuples),
        task=TaskSpec(**recorded["task"]),
        sampling=Sampling(**recorded["sampling"]),
        nonce=bytes.fromhex(recorded["nonce"]["hex"]),
    )


@pytest.mark.parametrize("name", GROUPS)
def test_golden_groups_decode_verify_and_reencode_exactly(name):
    body, signature = read(f"{name}.body"), read(f"{name}.sig")
    group = verify_signed(SignedGroup(body, signature))
    assert fields(group) == EXPECTED[name]
    assert isinstance(group.task, TaskSpec) and group.v == 3
    assert encode_group(group) == body
    assert encode_group(group_from(EXPECTED[name])) == body


@pytest.mark.parametrize("name", MANIFESTS)
def test_golden_manifests_decode_verify_and_reencode_exactly(name):
    body, signature = read(f"{name}.body"), read(f"{name}.sig")
    manifest = verify_manifest(SignedManifest(body, signature))
    assert fields(manifest) == EXPECTED[name] and manifest.v == 1
    assert encode_manifest(manifest) == body
    assert encode_manifest(DeltaManifest(**EXPECTED[name])) == body
    assert decode_manifest(body) == manifest


def test_golden_rollouts_message_unpacks_and_repacks_exactly():
    data = read("rollouts_message.bin")
    signed = unpack_message(data)
    assert signed == [SignedGroup(read(f"{n}.body"), read(f"{n}.sig")) for n in GROUPS]
    assert [fields(decode_group(s.body)) for s in signed] == [EXPECTED[n] for n in GROUPS]
    assert pack_messages(signed) == [data]


def test_golden_manifests_message_unpacks_and_repacks_exactly():
    data = read("manifests_message.bin")
    signed = unpack_manifests(data)
    assert signed == [SignedManifest(read(f"{n}.body"), read(f"{n}.sig")) for n in MANIFESTS]
    assert [fields(verify_manifest(s)) for s in signed] == [EXPECTED[n] for n in MANIFESTS]
    assert pack_manifests(signed) == data


def test_golden_peer_exchange_answer():
    data = read("peer_exchange.json.bin")
    peers = decode_peer_exchange(data)
    assert [{"id": p.id, "addrs": list(p.addrs)} for p in peers] == EXPECTED["peer_exchange"][
        "peers"
    ]
    assert encode_peer_exchange(peers) == data


def test_golden_blob_frames():
    key, size = EXPECTED["blob"]["key"], EXPECTED["blob"]["ok_size"]
    assert blob_request(key) == read("blob_request.bin")
    assert blob_response_header(BlobStatus.OK, size) == read("blob_response_ok.bin")
    assert blob_response_header(BlobStatus.MISSING, 0) == read("blob_response_missing.bin")
    assert parse_blob_response_header(read("blob_response_ok.bin")) == (BlobStatus.OK, size)


@pytest.mark.parametrize(
    "payload, found",
    [
        (b"not json", []),
        (b"[1, 2]", []),
        (b'{"peers": "x"}', []),
        (
            b'{"peers": [1, {"id": 5, "addrs": []}, {"id": "a"}, {"id": "b", "addrs": ["x", 7]}]}',
            [],
        ),
        (
            b'{"peers": [{"id": "a", "addrs": ["1", "2", "3", "4", 5]}]}',
            [PeerEntry("a", ("1", "2", "3", "4"))],
        ),
    ],
)
def test_peer_exchange_skips_what_is_not_a_peer_entry(payload, found):
    assert decode_peer_exchange(payload) == found
