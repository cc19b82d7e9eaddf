"""The verifier end to end over plain bytes: every check, its reason, and fuzzing that nothing escapes."""

from __future__ import annotations

import dataclasses

import msgpack
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarm.core.errors import RejectedMessage
from swarm.core.identity import peer_id_of, sign
from swarm.core.reasons import Reason
from swarm.tasks import EASY_MIX, TaskSpec, build_task
from swarm.verify.gate import Verifier, VerifySettings
from swarm.verify.reputation import ReputationSettings
from swarm.verify.rescore import rescore
from swarm.verify.rescore_pool import InProcess
from swarm.wire import SignedGroup, encode_group, pack_messages
from swarm.wire.signing import SIGNING_DOMAIN, sign_group
from tests.unit.wire.test_wire import KEY, OTHER, make_group

ME, THEM = peer_id_of(KEY), peer_id_of(OTHER)
NOW = 1_700_000_000.0


class Clock:
    def __init__(self, t=NOW):
        self.t = t

    def __call__(self):
        return self.t


def verifier(**changes) -> Verifier:
    settings = dataclasses.replace(VerifySettings(swarm_id="swarm-test"), **changes)
    return Verifier(settings, clock=Clock())


def honest(key=KEY, index=3, completions=None, bonus=0.1, **changes):
    """A group with correct claims for its sender's declared format bonus."""
    spec = TaskSpec.make("chain_sum", dict(EASY_MIX[0].config), seed=5, index=index)
    task = build_task(spec)
    completions = completions or (
        f"<answer>{task.answer}</answer>",
        f"<answer>{int(task.answer) + 1}</answer>",
        task.answer,
        "hmm",
    )
    group = make_group(
        key,
        task=spec,
        question=task.question,
        completions=tuple(completions),
        finished=(True,) * len(completions),
        token_ids=(),
        created_at=NOW,
        format_bonus=bonus,
        nonce=bytes([index % 256]) * 16,
    )
    group = msgspec.structs.replace(group, rewards=rescore(group, bonus)[1])
    return msgspec.structs.replace(group, **changes)


def message(*groups) -> bytes:
    keys = {ME: KEY, THEM: OTHER}
    return pack_messages([sign_group(g, keys[g.sender]) for g in groups])[0]


def reasons(rejected) -> list[str]:
    return [r.reason for r in rejected]


def test_an_honest_group_passes_everything_and_trains_on_our_rewards():
    v = verifier()
    accepted, rejected = v.admit(message(honest(bonus=0.3)), ME)
    assert rejected == [] and len(accepted) == 1
    task, rewards = v.verify_content(accepted[0].group, format_weight=0.1)
    assert rewards == pytest.approx((1.1, 0.1, 1.0, 0.0))  # our bonus, not the sender's 0.3
    assert task.spec == accepted[0].group.task


@pytest.mark.parametrize(
    "settings, group, reason",
    [
        ({"allow_list": frozenset({"someone-else"})}, honest(), "not_allowed"),
        ({}, honest(created_at=NOW + 301), "from_future"),
        ({}, honest(created_at=NOW - 3601), "stale"),
    ],
)
def test_gate_rejections(settings, group, reason):
    accepted, rejected = verifier(**settings).admit(message(group), ME)
    assert accepted == [] and reasons(rejected) == [reason]
    assert rejected[0].sender == ME and rejected[0].signed is not None


def test_wire_rejections_come_first():
    v = verifier()
    assert reasons(v.admit(b"\xc1junk", ME)[1]) == ["undecodable"]
    forged = pack_messages([SignedGroup(encode_group(honest()), b"\x00" * 64)])[0]
    assert reasons(v.admit(forged, ME)[1]) == ["bad_signature"]
    assert reasons(v.admit(message(honest()), THEM)[1]) == ["sender_mismatch"]


def test_duplicates_and_replayed_nonces():
    v = verifier()
    data = message(honest())
    assert v.admit(data, ME)[1] == []
    assert reasons(v.admit(data, ME)[1]) == ["duplicate"]
    again = message(honest(round=99))  # same nonce, other content, validly signed
    assert reasons(v.admit(again, ME)[1]) == ["replayed_nonce"]
    assert v.admit(message(honest(key=OTHER)), THEM)[1] == []  # nonces are per sender


def test_remembered_groups_count_as_seen_after_a_restart():
    first, newer = honest(), honest(index=4, policy_version=50)
    v = verifier(max_version_rewind=10)  # a fresh verifier, as after a restart
    for g in (first, newer):
        signed = sign_group(g, KEY)
        v.remember(g.sender, g.nonce, signed.content_hash, g.policy_version, NOW)
    assert reasons(v.admit(message(first), ME)[1]) == ["duplicate"]
    assert reasons(v.admit(message(honest(round=99)), ME)[1]) == ["replayed_nonce"]
    assert reasons(v.admit(message(honest(index=5, policy_version=39)), ME)[1]) == ["stale_version"]
    assert v.admit(message(honest(index=6, policy_version=45)), ME)[1] == []


def test_reputations_rebuilt_from_ledger_counts_throttle_but_do_not_ban_by_themselves():
    v = Verifier(VerifySettings(swarm_id="swarm-test"), clock=Clock(), own_peer_id=ME)
    v.restore_reputation(
        [
            (THEM, THEM, "accepted", "", 3),
            (THEM, THEM, "rejected", "reward_mismatch", 60),
            (
                "",
                "someone",
                "rejected",
                "bad_signature",
                9,
            ),  # unsigned and no source: nobody to blame
            (ME, ME, "rejected", "reward_mismatch", 9),  # our own groups never count
        ]
    )
    record = v.reputation.snapshot()
    assert set(record) == {THEM}
    assert record[THEM]["accepted"] == 3 and record[THEM]["rejected"] == {"reward_mismatch": 60}
    assert v.reputation.rate_factor(THEM) < 0.1
    assert v.admit(message(honest(key=OTHER)), THEM)[1] == []  # throttled, not banned


def test_version_staleness_is_per_sender():
    v = verifier(max_version_rewind=10)
    assert v.admit(message(honest(policy_version=50)), ME)[1] == []
    assert reasons(v.admit(message(honest(index=4, policy_version=39)), ME)[1]) == ["stale_version"]
    assert v.admit(message(honest(index=5, policy_version=40)), ME)[1] == []
    assert v.admit(message(honest(key=OTHER, policy_version=0)), THEM)[1] == []


def test_rate_limit_and_whole_message_rejection_leave_no_trace():
    v = verifier(rate_burst=3, rate_groups_per_s=0.001)
    groups = [honest(index=i) for i in range(4)]
    accepted, rejected = v.admit(message(*groups), ME)
    assert accepted == [] and sorted(reasons(rejected)) == ["in_rejected_message"] * 3 + [
        "rate_limited"
    ]
    assert (
        v.admit(message(*groups[:3]), ME)[1] == []
    )  # nothing of the refused message was remembered
    assert reasons(v.admit(message(honest(index=9)), ME)[1]) == ["rate_limited"]


def test_a_peer_past_its_byte_budget_is_rate_limited_however_few_its_groups():
    long = tuple(f"{'x' * 3000}<answer>{i}</answer>" for i in range(4))
    size = len(sign_group(honest(index=0, completions=long), KEY).body)
    short = len(sign_group(honest(index=4), KEY).body)
    v = verifier(rate_bytes_burst=3 * size + short, rate_bytes_per_s=10_000)
    for i in range(3):
        assert v.admit(message(honest(index=i, completions=long)), ME)[1] == []
    rejected = v.admit(message(honest(index=3, completions=long)), ME)[1]
    assert reasons(rejected) == ["rate_limited"] and "bytes" in rejected[0].detail
    assert v.admit(message(honest(index=4)), ME)[1] == []  # a short group still fits
    v.clock.t += 1.0  # the budget refills at its rate: 10 kB/s here, not yet a long group
    assert reasons(v.admit(message(honest(index=5, completions=long)), ME)[1]) == ["rate_limited"]
    v.clock.t += size / 10_000
    assert v.admit(message(honest(index=6, completions=long)), ME)[1] == []


def test_a_replay_inside_one_message_is_caught():
    v = verifier()
    accepted, rejected = v.admit(message(honest(), honest(round=5)), ME)
    assert accepted == [] and sorted(reasons(rejected)) == ["in_rejected_message", "replayed_nonce"]


@pytest.mark.parametrize(
    "group, reason",
    [
        (honest(rewards=(1.1, 1.1, 1.1, 1.1)), "reward_mismatch"),  # inflated
        (
            honest(bonus=0.5, rewards=(1.1, 0.1, 1.0, 0.0)),
            "reward_mismatch",
        ),  # lies about its bonus
        (
            honest(completions=("<answer>5</answer>", "x"), rewards=(1.1, 0.0)),
            "reward_mismatch",
        ),  # wrong ground truth
        (honest(question="What is 2 + 2?"), "question_mismatch"),
        (honest(task=TaskSpec.make("no_such_dataset", {}, 0, 0)), "bad_task"),
        (honest(task=TaskSpec.make("chain_sum", {"min_terms": "x"}, 0, 0)), "bad_task"),
    ],
)
def test_content_rejections(group, reason):
    v = verifier()
    accepted, rejected = v.admit(message(group), ME)
    assert rejected == []  # all of these pass the cheap checks: only rebuilding catches them
    with pytest.raises(RejectedMessage) as info:
        v.verify_content(accepted[0].group, 0.1)
    assert info.value.reason == reason


def test_copycat_is_caught_and_honest_nodes_are_not_flagged():
    v = verifier()
    original = honest(completions=("<answer>7</answer>", "<answer>8</answer>", "7", "8"))
    v.note_own(original)  # we published it
    copy = honest(key=OTHER, completions=("<answer>7</answer>", "<answer>8</answer>", "7", " 9"))
    with pytest.raises(RejectedMessage) as info:
        v.verify_content(copy, 0.1)
    assert info.value.reason == "copycat"
    # another peer, the same spec but its own completions: fine
    own = honest(
        key=OTHER, completions=("<answer>7</answer>", "<answer>9</answer>", "12", "no idea")
    )
    v.verify_content(own, 0.1)
    # identical short answers to *different* specs are what weak honest nodes produce
    same = ("<answer>7</answer>",) * 3 + ("<answer>8</answer>",)
    v.note_own(honest(index=20, completions=same))
    v.verify_content(honest(key=OTHER, index=21, completions=same), 0.1)
    # and a group of one repeated answer is never a copy, even on the same spec
    v.note_own(honest(index=30, completions=("<answer>7</answer>",) * 4))
    v.verify_content(honest(key=OTHER, index=30, completions=("<answer>7</answer>",) * 4), 0.1)


def test_reputation_bans_a_forger_by_its_libp2p_source_and_a_lifted_ban_starts_afresh():
    v = verifier(reputation=ReputationSettings(ban_after=5, ban_below=0.2))
    forged = pack_messages([SignedGroup(encode_group(honest(key=OTHER)), b"\x00" * 64)])[0]
    bans = []
    for _ in range(5):
        _, rejected = v.admit(forged, ME)  # claims to be THEM, published by ME
        bans += v.record([], rejected)
    assert [peer for peer, _ in bans] == [ME] and v.banned == {ME}
    assert reasons(v.admit(message(honest(index=40)), ME)[1]) == ["banned"]
    v.set_bans([])  # the user unbanned it
    assert v.admit(message(honest(index=41)), ME)[1] == [] and v.reputation.record(ME).penalty == 0


def test_unsigned_garbage_without_a_source_blames_nobody_and_allow_listed_peers_are_never_auto_banned():
    v = verifier(
        reputation=ReputationSettings(ban_after=1, ban_below=0.9), allow_list=frozenset({ME})
    )
    _, rejected = v.admit(
        pack_messages([SignedGroup(encode_group(honest(key=OTHER)), b"\x00" * 64)])[0], ""
    )
    assert reasons(rejected) == ["bad_signature"]
    assert v.record([], rejected) == [] and v.reputation.snapshot() == {}
    stale = verifier().admit(message(honest(created_at=0.0)), ME)[1]
    rejected = [
        dataclasses.replace(r, reason=Reason.REWARD_MISMATCH) for r in stale
    ] * 3  # hard failures by ME
    assert v.record([], rejected) == [] and v.banned == frozenset()
    assert v.reputation.record(ME).hard_penalty == 3


def test_recheck_refuses_senders_banned_after_validation():
    v = verifier()
    data = message(honest())
    assert v.admit(data, ME)[1] == []
    v.set_bans([ME])
    accepted, rejected = v.recheck(data, ME)
    assert accepted == [] and reasons(rejected) == ["banned"]


# ---------------------------------------------------------------------------------------------
# Fuzzing: whatever arrives, the validator and the content checks only ever *reject*.

_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_FIELDS = sorted(msgpack.unpackb(encode_group(honest()), raw=False))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=4096), st.sampled_from([ME, "", "junk"]))
def test_admit_never_raises_on_random_bytes(data, source):
    accepted, rejected = verifier().admit(data, source)
    assert accepted == [] and rejected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from(_FIELDS), _values, max_size=3),
    st.sets(st.sampled_from(_FIELDS), max_size=2),
)
def test_validator_and_content_checks_never_raise_on_signed_mutated_groups(changes, removed):
    """Validly signed bodies with fields replaced by arbitrary values or removed."""
    raw = msgpack.unpackb(encode_group(honest()), raw=False)
    raw.update(changes)
    for key in removed:
        raw.pop(key, None)
    try:
        body = msgpack.packb(raw, use_bin_type=True)
    except (OverflowError, ValueError, TypeError):
        return  # not representable in msgpack: cannot arrive
    data = pack_messages([SignedGroup(body, sign(KEY, SIGNING_DOMAIN + body))])[0]
    v = verifier()
    accepted, rejected = v.admit(data, ME)
    assert bool(accepted) != bool(rejected)
    for item in accepted:
        try:
            v.verify_content(item.group, 0.1)
        except RejectedMessage:
            pass


_specs = st.builds(
    TaskSpec.make,
    st.sampled_from(["chain_sum", "basic_arithmetic", "no_such_dataset", ""]),
    st.dictionaries(
        st.sampled_from(["min_terms", "max_terms", "min_digits", "max_digits", "size", "bogus"]),
        st.integers(-3, 4) | st.text(max_size=3) | st.none(),
        max_size=3,
    ),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**30 - 1),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_specs, st.lists(st.text(max_size=40), min_size=1, max_size=4), st.floats(0, 1))
def test_content_checks_only_reject_for_any_task_spec(spec, completions, bonus):
    group = make_group(
        task=spec,
        completions=tuple(completions),
        rewards=(0.0,) * len(completions),
        finished=(True,) * len(completions),
        token_ids=(),
        format_bonus=bonus,
    )
    try:
        verifier().verify_content(group, 0.1)
    except RejectedMessage as e:
        assert e.reason in {"bad_task", "question_mismatch", "reward_mismatch", "copycat"}


def test_a_message_is_decoded_once_from_the_validator_to_the_inbox(monkeypatch):
    import swarm.verify.message as message_module

    decoded = []
    real = message_module.decode_group

    def counting(body):
        decoded.append(body)
        return real(body)

    monkeypatch.setattr(message_module, "decode_group", counting)
    v = verifier(recheck_signatures=True)
    data = message(honest(), honest(index=4))
    assert v.admit(data, ME)[1] == [] and len(decoded) == 2
    accepted, rejected = v.recheck(bytes(bytearray(data)), ME)  # the inbox has its own copy
    assert rejected == [] and len(accepted) == 2 and len(decoded) == 2
    # A message the validator did not pass here (or whose entry was evicted) is decoded again.
    other = verifier()
    accepted, rejected = other.recheck(data, ME)
    assert rejected == [] and len(accepted) == 2 and len(decoded) == 4


def test_recheck_finds_a_message_by_its_bytes_and_its_source():
    v = verifier()
    data = message(honest())
    assert v.admit(data, ME)[1] == []
    _, rejected = v.recheck(data, THEM)  # same bytes, another source: checked again, and refused
    assert reasons(rejected) == ["sender_mismatch"]
    accepted, rejected = v.recheck(data, ME)
    assert rejected == [] and [a.group.sender for a in accepted] == [ME]


def test_claims_under_the_strict_rule_pass_and_we_train_on_our_own_scoring():
    """A sender scoring tagged answers only, without partial credit or bonus (the SAPO paper's
    reward), is not a liar to a lenient receiver; the receiver trains on its own scoring."""
    from swarm.tasks import AnswerRule, Scoring

    strict = Scoring(0.0, AnswerRule.TAGGED, partial_credit=False)
    group = honest(bonus=0.0)
    task = build_task(group.task)
    group = msgspec.structs.replace(
        group, rewards=tuple(strict.reward(task, c) for c in group.completions)
    )
    assert group.rewards == (1.0, 0.0, 0.0, 0.0)  # the untagged right answer scores 0
    v = verifier()
    accepted, rejected = v.admit(message(group), ME)
    assert rejected == []
    _, lenient = v.verify_content(accepted[0].group, format_weight=0.1)
    assert lenient == pytest.approx((1.1, 0.1, 1.0, 0.0))
    _, ours = verifier().verify_content(group, 0.1, strict)
    assert ours == (1.0, 0.0, 0.0, 0.0)
    lying = msgspec.structs.replace(group, rewards=(1.0, 1.0, 0.0, 0.0))
    with pytest.raises(RejectedMessage) as caught:
        verifier().verify_content(lying, 0.0)
    assert caught.value.reason == Reason.REWARD_MISMATCH


def test_tasks_outside_the_catalogue_are_refused_before_any_rebuild():
    """A peer naming a dataset config of its choice (a huge factorization, say) is refused on
    the spec alone: the task is never built."""
    from swarm.tasks import canonical_config

    own = frozenset({("chain_sum", canonical_config(dict(EASY_MIX[0].config)))})
    v = verifier(task_catalogue=own)
    accepted, rejected = v.admit(message(honest()), ME)
    assert rejected == [] and len(accepted) == 1
    costly = TaskSpec.make(
        "prime_factorization", {"min_value": 10**30, "max_value": 10**31}, seed=1, index=0
    )
    bad = honest(index=4, task=costly, question="(never rebuilt)")
    accepted, rejected = verifier(task_catalogue=own).admit(message(bad), ME)
    assert accepted == [] and reasons(rejected) == ["unlisted_task"]
    other_config = TaskSpec.make("chain_sum", {"min_terms": 2, "max_terms": 9}, seed=1, index=0)
    _, rejected = verifier(task_catalogue=own).admit(
        message(honest(index=5, task=other_config)), ME
    )
    assert reasons(rejected) == ["unlisted_task"]


def test_the_catalogue_is_the_own_mix_plus_the_configured_tasks():
    from swarm.config import build_config
    from swarm.tasks import canonical_config

    config = build_config(
        {
            "verify": {
                "task_catalogue": [{"dataset": "basic_arithmetic", "config": {"min_terms": 2}}]
            }
        },
        "test",
    )
    catalogue = VerifySettings.from_config(config).task_catalogue
    assert catalogue == {
        ("chain_sum", canonical_config(dict(EASY_MIX[0].config))),
        ("basic_arithmetic", canonical_config({"min_terms": 2})),
    }
    with pytest.raises(Exception, match="task_catalogue"):
        build_config({"verify": {"task_catalogue": [{"name": "x"}]}}, "test")


class SlowRescorer:
    """An in-process rescorer that reports each group as costing `seconds`."""

    def __init__(self, seconds: float):
        self.seconds, self.calls = seconds, 0
        self.inner = InProcess()

    def __call__(self, group):
        self.calls += 1
        attempt = self.inner(group)
        return dataclasses.replace(attempt, seconds=self.seconds)

    def start(self):
        pass

    def close(self):
        pass


def test_a_peer_past_its_share_of_verification_time_is_refused_without_work():
    clock, slow = Clock(), SlowRescorer(1.5)
    settings = dataclasses.replace(
        VerifySettings(swarm_id="swarm-test"), peer_verify_share=0.1, peer_verify_burst_s=2.0
    )
    v = Verifier(settings, clock=clock, rescorer=slow)
    groups = [honest(index=i) for i in range(10, 14)]
    v.verify_content(groups[0], 0.1, peer=ME)  # 2.0 s left -> 0.5
    v.verify_content(groups[1], 0.1, peer=ME)  # 0.5 left: verified, -> -1.0
    with pytest.raises(RejectedMessage) as refused:
        v.verify_content(groups[2], 0.1, peer=ME)
    assert refused.value.reason == Reason.VERIFY_BUDGET and slow.calls == 2
    v.verify_content(groups[2], 0.1, peer=THEM)  # another peer's share is its own
    clock.t += 10.1  # refills 0.1 s per s: back above zero
    v.verify_content(groups[3], 0.1, peer=ME)
    assert slow.calls == 4


def test_a_rescorer_rejection_is_charged_and_raised():
    clock, slow = Clock(), SlowRescorer(3.0)
    settings = dataclasses.replace(
        VerifySettings(swarm_id="swarm-test"), peer_verify_share=0.1, peer_verify_burst_s=2.0
    )
    v = Verifier(settings, clock=clock, rescorer=slow)
    with pytest.raises(RejectedMessage) as wrong:
        v.verify_content(honest(index=20, question="What?"), 0.1, peer=ME)
    assert wrong.value.reason == Reason.QUESTION_MISMATCH
    with pytest.raises(RejectedMessage) as refused:
        v.verify_content(honest(index=21), 0.1, peer=ME)
    assert refused.value.reason == Reason.VERIFY_BUDGET


def test_the_byte_burst_follows_our_own_rounds_with_a_floor():
    from swarm.config import Config
    from swarm.verify.gate import auto_byte_burst

    config = Config()
    assert VerifySettings.from_config(config).rate_bytes_burst == 8 * 2**20  # small rounds
    long = dataclasses.replace(
        config.generation, questions_per_round=8, completions_per_question=16, max_new_tokens=16384
    )
    assert auto_byte_burst(long) == 2 * 8 * 16 * 16384 * 16  # 64 MiB: two rounds of 4 MiB groups
