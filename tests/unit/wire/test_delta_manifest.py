"""The delta-manifest wire type (swarm.wire): canonical, signed, strictly decoded."""

from __future__ import annotations

import msgpack
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.core.errors import RejectedMessage
from swarm.core.identity import create_identity, peer_id_of
from swarm.core.reasons import Reason
from swarm.wire import (
    MAX_MANIFEST_MESSAGE_BYTES,
    MAX_MANIFESTS_PER_MESSAGE,
    DeltaManifest,
    SignedManifest,
    decode_manifest,
    encode_manifest,
    pack_manifests,
    unpack_manifests,
)
from swarm.wire.signing import sign_manifest, verify_manifest

KEY = create_identity(b"\x01" * 32)
OTHER = create_identity(b"\x02" * 32)


def manifest(**changes) -> DeltaManifest:
    m = DeltaManifest(
        swarm_id="swarm-local",
        provider=peer_id_of(KEY),
        model="swarm-tiny",
        base_hash="ab" * 32,
        kind="delta",
        from_version=3,
        to_version=4,
        size=1234,
        payload_hash="cd" * 32,
        result_hash="ef" * 32,
        key="sync/abababababababab/delta/3-4",
        created_at=1.7e9,
    )
    return msgspec.structs.replace(m, **changes)


def reason(fn, *args) -> Reason:
    with pytest.raises(RejectedMessage) as e:
        fn(*args)
    return e.value.reason


def test_roundtrip_through_a_gossip_message():
    delta = sign_manifest(manifest(), KEY)
    anchor = sign_manifest(manifest(kind="anchor", from_version=-1, to_version=10), KEY)
    got = [verify_manifest(s) for s in unpack_manifests(pack_manifests([delta, anchor]))]
    assert got == [manifest(), manifest(kind="anchor", from_version=-1, to_version=10)]


@settings(max_examples=100, deadline=None)
@given(
    from_version=st.integers(0, 2**40),
    jump=st.integers(1, 1000),
    size=st.integers(1, 1 << 40),
    created_at=st.floats(0.0, 1e12, allow_nan=False),
    model=st.text(max_size=64),
)
def test_any_valid_manifest_roundtrips_canonically(from_version, jump, size, created_at, model):
    m = manifest(
        from_version=from_version,
        to_version=from_version + jump,
        size=size,
        created_at=created_at,
        model=model,
    )
    body = encode_manifest(m)
    assert decode_manifest(body) == m
    assert encode_manifest(decode_manifest(body)) == body


def test_signature_binds_provider_and_every_byte():
    signed = sign_manifest(manifest(), KEY)
    assert reason(verify_manifest, SignedManifest(signed.body, b"\x00" * 64)) == "bad_signature"
    # Same body claimed by another provider: the signature is by KEY, not by OTHER.
    claimed = encode_manifest(manifest(provider=peer_id_of(OTHER)))
    assert reason(verify_manifest, SignedManifest(claimed, signed.signature)) == "bad_signature"
    tampered = encode_manifest(manifest(size=1235))
    assert reason(verify_manifest, SignedManifest(tampered, signed.signature)) == "bad_signature"
    with pytest.raises(ValueError):
        sign_manifest(manifest(provider=peer_id_of(OTHER)), KEY)


def _raw(**changes) -> dict:
    raw = msgpack.unpackb(encode_manifest(manifest()), raw=False)
    raw.update(changes)
    return raw


@pytest.mark.parametrize(
    "raw, code",
    [
        (_raw(v=2), "unknown_schema"),
        (_raw(kind="patch"), "malformed"),
        (_raw(from_version=4), "malformed"),  # a delta must move forward
        (_raw(from_version=-1), "malformed"),  # only an anchor has no base version
        (_raw(kind="anchor"), "malformed"),  # an anchor's from_version must be -1
        (_raw(size=0), "malformed"),
        (_raw(size=True), "malformed"),
        (_raw(to_version=4.0), "malformed"),
        (_raw(payload_hash="CD" * 32), "malformed"),
        (_raw(result_hash="ef" * 31), "malformed"),
        (_raw(base_hash=b"\xab" * 32), "malformed"),
        (_raw(key="k" * 513), "malformed"),
        (_raw(created_at=float("nan")), "malformed"),
        (_raw(extra=1), "malformed"),
        ({k: v for k, v in _raw().items() if k != "size"}, "malformed"),
    ],
)
def test_bad_fields_are_rejected_with_a_reason(raw, code):
    assert reason(decode_manifest, msgpack.packb(raw, use_bin_type=True)) == code


def test_non_canonical_and_garbage_bodies_are_rejected():
    raw = _raw()
    shuffled = dict(reversed(list(raw.items())))
    assert reason(decode_manifest, msgpack.packb(shuffled, use_bin_type=True)) == "non_canonical"
    assert reason(decode_manifest, b"\xc1") == "undecodable"
    assert reason(decode_manifest, msgpack.packb([1, 2])) == "malformed"
    assert reason(decode_manifest, b"\x00" * 5000) == "oversize"


def test_bad_envelopes_are_rejected_with_a_reason():
    good = sign_manifest(manifest(), KEY)
    envelope = {"v": 1, "kind": "delta_manifests", "manifests": [[good.body, good.signature]]}
    cases = [
        ({**envelope, "v": 9}, "unknown_schema"),
        ({**envelope, "kind": "rollouts"}, "malformed"),
        ({**envelope, "manifests": []}, "malformed"),
        ({**envelope, "manifests": [[good.body]]}, "malformed"),
        ({**envelope, "manifests": [["x", good.signature]]}, "malformed"),
        ({**envelope, "manifests": [[b"\x00" * 3000, good.signature]]}, "oversize"),
        ({"v": 1, "kind": "delta_manifests"}, "malformed"),
    ]
    for env, code in cases:
        assert reason(unpack_manifests, msgpack.packb(env, use_bin_type=True)) == code, env
    assert reason(unpack_manifests, b"\x00" * (MAX_MANIFEST_MESSAGE_BYTES + 1)) == "oversize"
    with pytest.raises(ValueError):
        pack_manifests([good] * (MAX_MANIFESTS_PER_MESSAGE + 1))
    with pytest.raises(ValueError):
        pack_manifests([])


def test_signing_refuses_a_manifest_receivers_would_reject():
    with pytest.raises(RejectedMessage) as e:
        sign_manifest(manifest(from_version=4), KEY)
    assert e.value.reason == Reason.MALFORMED
