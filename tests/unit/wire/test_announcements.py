"""Announcements of the pull exchange: wire format, signature, and the cheap checks on them."""

from __future__ import annotations

import hashlib

import msgspec
import pytest

from lab.synthetic import SyntheticRollouts, SyntheticShape, wire_group
from swarm.core.errors import RejectedMessage
from swarm.core.identity import create_identity, peer_id_of
from swarm.core.reasons import Reason
from swarm.tasks import EASY_MIX, Scoring, canonical_config, stream_seed
from swarm.verify.announcements import AnnouncementGate, check_matches, check_served
from swarm.wire import (
    GroupAnnouncement,
    HolderHint,
    SignedAnnouncement,
    SignedGroup,
    decode_announcement,
    decode_group,
    encode_announcement,
    encode_signed_group,
    pack_announcements,
    unpack_announcements,
)
from swarm.wire.signing import sign_announcement, sign_group, verify_announcement

NOW = 1_000_000.0
CATALOGUE = frozenset((e.dataset, canonical_config(dict(e.config))) for e in EASY_MIX)


def make(key_pair=None, *, salt: int = 0, seed: int | None = None, created_at: float = NOW):
    """A signed group of a sender's own stream and its announcement."""
    key_pair = key_pair or create_identity()
    sender = peer_id_of(key_pair)
    seed = stream_seed(sender, salt) if seed is None else seed
    (g,) = SyntheticRollouts(EASY_MIX, seed, SyntheticShape(), Scoring(0.1)).round_groups(0, 1)
    group = wire_group(
        g,
        swarm_id="s",
        sender=sender,
        model="m",
        base_hash="0" * 64,
        policy_version=0,
        round_index=0,
        created_at=created_at,
        format_bonus=0.1,
    )
    signed = sign_group(group, key_pair)
    served = encode_signed_group(signed)
    announcement = GroupAnnouncement(
        base_hash=group.base_hash,
        blob_hash=hashlib.sha256(served).hexdigest(),
        created_at=created_at,
        model="m",
        policy_version=0,
        rewards=group.rewards,
        round=0,
        seed_salt=salt,
        sender=sender,
        size=len(served),
        swarm_id="s",
        task=group.task,
    )
    return key_pair, signed, announcement, sign_announcement(announcement, key_pair)


def gate(**options) -> AnnouncementGate:
    return AnnouncementGate("s", catalogue=CATALOGUE, **options)


def test_an_announcement_is_small_canonical_and_round_trips():
    _, _, announcement, signed = make()
    assert decode_announcement(signed.body) == announcement
    assert encode_announcement(announcement) == signed.body
    assert len(signed.body) < 1024
    assert verify_announcement(signed) == announcement


def test_the_served_list_carries_holder_hints():
    _, signed_group, _, signed = make()
    hint = HolderHint(signed_group.content_hash, "peer", ("/ip4/127.0.0.1/tcp/1",))
    items, hints = unpack_announcements(pack_announcements([signed], [hint]))
    assert items == [signed] and hints == [hint]


def test_a_non_canonical_or_oversized_announcement_is_refused():
    _, _, _, signed = make()
    reordered = msgspec.msgpack.encode(dict(reversed(msgspec.msgpack.decode(signed.body).items())))
    with pytest.raises(RejectedMessage) as e:
        decode_announcement(reordered)
    assert e.value.reason == Reason.NON_CANONICAL
    with pytest.raises(RejectedMessage) as e:
        decode_announcement(b"\x00" * 5000)
    assert e.value.reason == Reason.OVERSIZE


def test_a_good_announcement_passes_once():
    key_pair, _, announcement, signed = make()
    g = gate()
    assert g.check(signed, announcement.sender, NOW) == announcement
    with pytest.raises(RejectedMessage) as e:
        g.check(signed, announcement.sender, NOW)
    assert e.value.reason == Reason.DUPLICATE


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("forged signature", Reason.BAD_SIGNATURE),
        ("served by another peer", Reason.SENDER_MISMATCH),
        ("other swarm", Reason.WRONG_SWARM),
        ("banned sender", Reason.BANNED),
        ("task from another stream", Reason.FOREIGN_TASK),
        ("task off the catalogue", Reason.UNLISTED_TASK),
        ("too old", Reason.STALE),
        ("from the future", Reason.FROM_FUTURE),
    ],
)
def test_cheap_checks_refuse_with_their_reason(case, reason):
    key_pair, _, announcement, signed = make(
        seed=4242 if case == "task from another stream" else None,
        created_at={"too old": NOW - 7200, "from the future": NOW + 3600}.get(case, NOW),
    )
    source, checker = announcement.sender, gate()
    if case == "forged signature":
        signed = SignedAnnouncement(signed.body, bytes(64))
    elif case == "served by another peer":
        source = peer_id_of(create_identity())
    elif case == "other swarm":
        checker = AnnouncementGate("other", catalogue=CATALOGUE)
    elif case == "banned sender":
        checker = gate(banned=lambda: {announcement.sender})
    elif case == "task off the catalogue":
        checker = AnnouncementGate("s", catalogue=frozenset({("basic_arithmetic", "{}")}))
    with pytest.raises(RejectedMessage) as e:
        checker.check(signed, source, NOW)
    assert e.value.reason == reason


def test_a_sender_over_its_rate_is_refused():
    key_pair = create_identity()
    checker = gate(rate_per_s=1e-9, burst=2)  # refills nothing in the test (0 would be off)
    outcomes = []
    for salt in range(3):
        _, _, announcement, signed = make(key_pair, salt=salt)
        try:
            checker.check(signed, announcement.sender, NOW)
            outcomes.append("ok")
        except RejectedMessage as e:
            outcomes.append(e.reason)
    assert outcomes == ["ok", "ok", Reason.RATE_LIMITED]


def test_a_pulled_group_must_be_the_announced_one():
    _, signed, announcement, _ = make()
    check_served(announcement, encode_signed_group(signed))
    check_matches(announcement, decode_group(signed.body))
    _, other, _, _ = make()
    with pytest.raises(RejectedMessage) as e:
        check_matches(announcement, decode_group(other.body))
    assert e.value.reason == Reason.ANNOUNCEMENT_MISMATCH
    assert "sender" in e.value.detail


def test_the_announced_hash_covers_the_signature_too():
    """A good body with a broken signature is not the announced blob: refused unread."""
    _, signed, announcement, _ = make()
    broken = SignedGroup(signed.body, bytes(64))
    for served in (encode_signed_group(broken), encode_signed_group(signed) + b"\0"):
        with pytest.raises(RejectedMessage) as e:
            check_served(announcement, served)
        assert e.value.reason == Reason.ANNOUNCEMENT_MISMATCH
