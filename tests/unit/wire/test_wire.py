"""Rollout groups on the wire: round trips, canonical bytes, signatures that catch any tampering."""

from __future__ import annotations

import msgpack
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.core.errors import RejectedMessage
from swarm.core.identity import create_identity, peer_id_of
from swarm.core.reasons import Reason
from swarm.tasks import TaskSpec
from swarm.wire import (
    MAX_MESSAGE_BYTES,
    MAX_TEXT_CHARS,
    SCHEMA_VERSION,
    RolloutGroup,
    Sampling,
    SignedGroup,
    decode_group,
    encode_group,
    pack_messages,
    stored_nonce,
    unpack_message,
)
from swarm.wire.signing import sign_group, verify_signed

KEY = create_identity(b"\x01" * 32)
OTHER = create_identity(b"\x02" * 32)


def make_group(key=KEY, **changes) -> RolloutGroup:
    group = RolloutGroup(
        swarm_id="swarm-test",
        sender=peer_id_of(key),
        task=TaskSpec.make("chain_sum", {"min_terms": 2, "max_terms": 2}, seed=3, index=7),
        question="State the final answer to the following arithmetic problem: 4 + 5 =",
        completions=("<answer>9</answer>", "<answer>10</answer>", "9", "<answer>ünïcode</answer>"),
        rewards=(1.1, 0.1, 1.0, 0.1),
        finished=(True, True, False, True),
        model="swarm-tiny",
        base_hash="ab" * 16,
        policy_version=12,
        sampling=Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8),
        round=12,
        created_at=1_700_000_000.5,
        nonce=b"n" * 16,
        token_ids=((4, 20, 5), (4, 18, 17, 5), (20,), (4, 3, 5)),
        format_bonus=0.1,
    )
    return msgspec.structs.replace(group, **changes)


def test_round_trip_is_exact_and_canonical():
    group = make_group()
    signed = sign_group(group, KEY)
    assert verify_signed(signed) == group
    assert encode_group(decode_group(signed.body)) == signed.body
    assert signed.content_hash == SignedGroup(encode_group(group), b"").content_hash
    assert make_group(nonce=b"m" * 16) != group


def test_format_bonus_travels_and_is_signed():
    group = make_group(format_bonus=0.25)
    signed = sign_group(group, KEY)
    assert verify_signed(signed).format_bonus == 0.25
    other = sign_group(make_group(format_bonus=0.0), KEY)
    assert other.content_hash != signed.content_hash
    with pytest.raises(RejectedMessage):  # the bonus cannot be changed under a signature
        verify_signed(SignedGroup(encode_group(make_group(format_bonus=0.0)), signed.signature))


def test_messages_batch_groups_and_unpack_to_the_same_groups():
    signed = [sign_group(make_group(round=i, nonce=bytes([i]) * 16), KEY) for i in range(50)]
    messages = pack_messages(signed, target_bytes=4096)
    assert len(messages) > 1 and all(len(m) <= MAX_MESSAGE_BYTES for m in messages)
    back = [g for m in messages for g in unpack_message(m)]
    assert back == signed


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_flipped_byte_fails_verification(data):
    signed = sign_group(make_group(), KEY)
    blob = bytearray(signed.body + signed.signature)
    position = data.draw(st.integers(0, len(blob) - 1))
    blob[position] ^= data.draw(st.integers(1, 255))
    tampered = SignedGroup(bytes(blob[: len(signed.body)]), bytes(blob[len(signed.body) :]))
    with pytest.raises(RejectedMessage):
        verify_signed(tampered)


def test_signature_binds_to_the_sender():
    group = make_group()
    forged = SignedGroup(encode_group(group), sign_group(make_group(OTHER), OTHER).signature)
    with pytest.raises(RejectedMessage) as info:
        verify_signed(forged)
    assert info.value.reason == Reason.BAD_SIGNATURE
    with pytest.raises(ValueError):
        sign_group(group, OTHER)  # our own code refuses to sign as someone else


def _body(mutate) -> bytes:
    raw = msgpack.unpackb(encode_group(make_group()), raw=False)
    mutate(raw)
    return msgpack.packb(raw, use_bin_type=True)


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda r: r.update(v=1), "unknown_schema"),  # the schema before format_bonus
        (
            lambda r: r.update(v=2),
            "unknown_schema",
        ),  # the schema whose format bonus allowed trailing text
        (lambda r: r.pop("nonce"), "malformed"),
        (lambda r: r.update(extra=1), "malformed"),
        (lambda r: r.update(rewards=[float("nan")] * 4), "bad_reward"),
        (lambda r: r.update(rewards=[1e9] * 4), "bad_reward"),
        (lambda r: r.update(rewards=[1.0]), "malformed"),
        (lambda r: r.update(completions=[]), "malformed"),
        (lambda r: r.update(completions=[1, 2, 3, 4]), "malformed"),
        (lambda r: r.update(policy_version=-1), "malformed"),
        (lambda r: r.update(policy_version=True), "malformed"),
        (lambda r: r.update(nonce=b"short"), "malformed"),
        (lambda r: r["task"].update(index="7"), "malformed"),
        (lambda r: r["sampling"].update(top_p=2.0), "malformed"),
        (lambda r: r.update(created_at=float("inf")), "malformed"),
        (lambda r: r.update(token_ids=[[1, -2]] * 4), "malformed"),
        (lambda r: r.update(question="x" * (MAX_TEXT_CHARS + 1)), "malformed"),
        (lambda r: r.update(format_bonus=2.0), "malformed"),
        (lambda r: r.update(format_bonus=-0.1), "malformed"),
        (lambda r: r.update(format_bonus=float("nan")), "malformed"),
        (lambda r: r.update(format_bonus=1), "malformed"),
        (lambda r: r.pop("format_bonus"), "malformed"),
        (lambda r: r["task"].update(config='{"b":1,"a":2}'), "malformed"),
        (lambda r: r["task"].update(config="not json"), "malformed"),
        (lambda r: r["task"].update(config="[1,2]"), "malformed"),
        (lambda r: r["task"].update(config="[" * 2000 + "]" * 2000), "malformed"),
        (lambda r: r["task"].update(config='{"a":NaN}'), "malformed"),
    ],
)
def test_malformed_bodies_are_rejected_with_a_reason(mutate, reason):
    with pytest.raises(RejectedMessage) as info:
        decode_group(_body(mutate))
    assert info.value.reason == reason


def test_non_canonical_encoding_is_rejected():
    raw = msgpack.unpackb(encode_group(make_group()), raw=False)
    reordered = msgpack.packb(dict(reversed(list(raw.items()))), use_bin_type=True)
    with pytest.raises(RejectedMessage) as info:
        decode_group(reordered)
    assert info.value.reason == "non_canonical"


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"\xc1garbage", "undecodable"),
        (b"", "undecodable"),
        (msgpack.packb([1, 2, 3]), "malformed"),
        (msgpack.packb({"v": 9, "kind": "rollouts", "groups": []}), "unknown_schema"),
        (msgpack.packb({"v": SCHEMA_VERSION, "kind": "rollouts", "groups": []}), "malformed"),
        (
            msgpack.packb({"v": SCHEMA_VERSION, "kind": "rollouts", "groups": [["a", "b"]]}),
            "malformed",
        ),
        (b"\x00" * (MAX_MESSAGE_BYTES + 1), "oversize"),
    ],
)
def test_bad_envelopes_are_rejected(data, reason):
    with pytest.raises(RejectedMessage) as info:
        unpack_message(data)
    assert info.value.reason == reason


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=2048))
def test_random_bytes_never_raise_anything_but_rejection(data):
    try:
        for signed in unpack_message(data):
            verify_signed(signed)
    except RejectedMessage:
        pass


def test_stored_nonce_reads_a_body_without_decoding_the_group():
    group = make_group(KEY)
    assert stored_nonce(sign_group(group, KEY).body) == group.nonce


def test_a_group_built_with_other_number_types_encodes_canonically():
    """Ints where floats are declared, numpy-like values: the body is what floats would give."""
    group = make_group(
        created_at=1_700_000_000, rewards=(1, 0, 1, 0), format_bonus=0, policy_version=True
    )
    body = encode_group(group)
    assert body == encode_group(
        make_group(
            created_at=1_700_000_000.0,
            rewards=(1.0, 0.0, 1.0, 0.0),
            format_bonus=0.0,
            policy_version=1,
        )
    )
    decoded = decode_group(body)
    assert type(decoded.created_at) is float and all(type(r) is float for r in decoded.rewards)


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (
            lambda r: r.update(rewards=[1, 0, 1, 0]),
            "non_canonical",
        ),  # integer rewards: allowed types, other bytes
        (
            lambda r: r.update(created_at=1_700_000_000),
            "malformed",
        ),  # an integer where a float is declared
        (lambda r: r["sampling"].update(top_p=1), "malformed"),
        (lambda r: r.update(rewards=["1", 0.0, 0.0, 0.0]), "bad_reward"),
        (
            lambda r: r.update(rewards=[float("nan")] * 4, policy_version=-1),
            "bad_reward",
        ),  # rewards come first
        (lambda r: r.update(rewards=[1.0], policy_version=-1), "malformed"),
        (lambda r: (r.pop("v"), r.update(rewards=[float("nan")] * 4)), "unknown_schema"),
        (lambda r: r.update(finished=[1, 1, 0, 1]), "malformed"),
        (lambda r: r.update(token_ids=[[1]]), "malformed"),
        (lambda r: r.update(sampling=[1.0, 1.0, 0, 8]), "malformed"),
    ],
)
def test_reasons_keep_their_order_of_precedence(mutate, reason):
    with pytest.raises(RejectedMessage) as info:
        decode_group(_body(mutate))
    assert info.value.reason == reason


def test_a_signed_item_with_extra_elements_is_refused():
    signed = sign_group(make_group(), KEY)
    data = msgpack.packb(
        {
            "v": SCHEMA_VERSION,
            "kind": "rollouts",
            "groups": [[signed.body, signed.signature, None]],
        },
        use_bin_type=True,
    )
    with pytest.raises(RejectedMessage) as info:
        unpack_message(data)
    assert info.value.reason == Reason.MALFORMED


@pytest.mark.parametrize(
    "body, reason",
    [
        (msgpack.packb({1: 2}), "undecodable"),  # map keys must be strings
        (msgpack.packb({"v": msgpack.ExtType(1, b"x")}), "undecodable"),
        (b"\x91" * 2000 + b"\x00", "undecodable"),  # nesting
        (b"\xa2\xff\xfe", "undecodable"),  # not UTF-8
    ],
)
def test_bytes_beyond_the_decoder_limits_are_undecodable(body, reason):
    with pytest.raises(RejectedMessage) as info:
        decode_group(body)
    assert info.value.reason == reason
