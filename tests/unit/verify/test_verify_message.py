"""Cheap checks on inbound messages, local re-scoring, and the experience pool."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.core.errors import RejectedMessage
from swarm.core.identity import peer_id_of
from swarm.core.reasons import Reason
from swarm.experience import ExperiencePool, SharedGroup, group_bytes
from swarm.tasks import EASY_MIX, TaskSpec, build_task
from swarm.verify.message import check_message
from swarm.verify.rescore import rescore
from swarm.wire import SignedGroup, decode_group, encode_group, pack_messages
from swarm.wire.signing import sign_group
from tests.unit.wire.test_wire import KEY, OTHER, make_group

ME = peer_id_of(KEY)


def _message(*groups):
    return pack_messages(list(groups))[0]


def test_good_message_is_accepted():
    signed = sign_group(make_group(), KEY)
    accepted, rejected = check_message(_message(signed), ME, "swarm-test")
    assert rejected == [] and [a.signed for a in accepted] == [signed]


@pytest.mark.parametrize(
    "build, source, reason",
    [
        (lambda: sign_group(make_group(swarm_id="other"), KEY), ME, "wrong_swarm"),
        (lambda: sign_group(make_group(OTHER), OTHER), ME, "sender_mismatch"),
        (lambda: SignedGroup(encode_group(make_group()), b"\x00" * 64), ME, "bad_signature"),
    ],
)
def test_bad_groups_are_rejected_with_their_reason(build, source, reason):
    accepted, rejected = check_message(_message(build()), source, "swarm-test")
    assert accepted == [] and [r.reason for r in rejected] == [reason]
    assert rejected[0].sender in (ME, peer_id_of(OTHER))
    assert (
        rejected[0].group is None
    )  # the ledger records what a refused group claims only from its sender


def test_a_group_that_does_not_decode_names_no_sender():
    body = bytearray(encode_group(make_group()))
    body[-1] = 0xC1  # the schema version is no longer msgpack
    accepted, rejected = check_message(
        _message(SignedGroup(bytes(body), b"\x00" * 64)), ME, "swarm-test"
    )
    assert accepted == [] and [(r.reason, r.sender) for r in rejected] == [(Reason.UNDECODABLE, "")]


def test_signatures_are_skipped_only_when_asked():
    forged = SignedGroup(encode_group(make_group()), b"\x00" * 64)
    assert check_message(_message(forged), ME, "swarm-test")[0] == []
    accepted, rejected = check_message(_message(forged), ME, "swarm-test", verify_signatures=False)
    assert rejected == [] and [a.group for a in accepted] == [decode_group(forged.body)]


def test_one_bad_group_rejects_the_whole_message_and_records_every_group():
    good = sign_group(make_group(), KEY)
    bad = SignedGroup(encode_group(make_group(nonce=b"x" * 16)), b"\x00" * 64)
    accepted, rejected = check_message(_message(good, bad), ME, "swarm-test")
    assert accepted == []
    assert sorted(r.reason for r in rejected) == ["bad_signature", "in_rejected_message"]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096), st.text(max_size=60))
def test_check_message_never_raises(data, source):
    accepted, rejected = check_message(data, source, "swarm-test")
    assert accepted == [] and len(rejected) >= 1


def _easy_group(**changes):
    spec = TaskSpec.make("chain_sum", dict(EASY_MIX[0].config), seed=5, index=3)
    task = build_task(spec)
    wrong = str(int(task.answer) + 1)
    group = make_group(
        task=spec,
        question=task.question,
        completions=(f"<answer>{task.answer}</answer>", f"<answer>{wrong}</answer>"),
        rewards=(9.0, 9.0),
        finished=(True, True),
        token_ids=(),
    )
    return msgspec.structs.replace(group, **changes)


def test_rescore_uses_the_local_verifier_not_the_claims():
    task, rewards = rescore(_easy_group(), format_weight=0.1)
    assert rewards == pytest.approx((1.1, 0.1))


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({"question": "What is 2 + 2?"}, "question_mismatch"),
        ({"task": TaskSpec.make("no_such_dataset", {}, 0, 0)}, "bad_task"),
        ({"task": TaskSpec.make("chain_sum", {"min_terms": "x"}, 0, 0)}, "bad_task"),
    ],
)
def test_rescore_rejects_groups_whose_task_does_not_rebuild(changes, reason):
    with pytest.raises(RejectedMessage) as info:
        rescore(_easy_group(**changes), format_weight=0.0)
    assert info.value.reason == reason


def test_pool_is_bounded_and_groups_leave_when_used():
    task = build_task(TaskSpec.make("chain_sum", {}, 0, 0))
    pool = ExperiencePool(capacity=3)
    groups = [
        SharedGroup(
            i, f"h{i}", "p", task, ("a", "b"), (True, True), (0.0, 1.0), (0.0, 1.0), 0, True, 0.0
        )
        for i in range(5)
    ]
    for g in groups:
        pool.add(g)
    assert len(pool) == 3 and pool.evicted == 2
    assert [c.group.content_hash for c in pool.candidates()] == ["h2", "h3", "h4"]
    pool.take([groups[3]])
    assert [c.group.content_hash for c in pool.candidates()] == ["h2", "h4"]


def test_pool_is_bounded_in_bytes_of_text():
    task = build_task(TaskSpec.make("chain_sum", {}, 0, 0))
    big = "x" * 10_000

    def group(i: int) -> SharedGroup:
        return SharedGroup(
            i, f"h{i}", "p", task, (big, big), (True, True), (0.0, 1.0), (0.0, 1.0), 0, True, 0.0
        )

    one = group_bytes(group(0))
    pool = ExperiencePool(capacity=1000, max_bytes=3 * one)
    for i in range(10):
        pool.add(group(i))
    assert len(pool) == 3 and pool.evicted == 7 and pool.nbytes == 3 * one
    pool.add(group(9))  # the same group again replaces itself, not a second copy
    assert len(pool) == 3 and pool.nbytes == 3 * one
    pool.take([group(8)])
    assert len(pool) == 2 and pool.nbytes == 2 * one
