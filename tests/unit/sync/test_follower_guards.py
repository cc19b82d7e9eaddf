"""A follower survives a bad trainer: every finding is a step the follower refuses, bounds or
records, and each refusal leaves its weights bit-identical (over MemoryTransport).

- a correctly hashed and signed delta of NaN or infinite weights is refused, and the
  payload is listed to be remembered across restarts;
- a payload is refused by its announced size and by its header (other tensors, shapes,
  versions) before the rest of it is read;
- a slow trainer costs a bounded share of a round, and a failing step is retried with
  exponential back-off, not every round;
- an anchor announced and never served gives way to the deltas that are served;
- a peer the node does not follow costs a counter per manifest, not a ledger row each.
"""

from __future__ import annotations

import msgspec
import pytest
import torch

from swarm.core.errors import FetchTooSlow, RejectedMessage
from swarm.p2p.transport import MemoryTransport
from swarm.policy.delta import encode_anchor
from swarm.sync.rules import Backoff, PayloadCheck, RejectionLimiter
from swarm.wire import delta_topic, pack_manifests
from swarm.wire.signing import sign_manifest
from tests.unit.sync.test_sync import (
    MALLORY,
    MALLORY_KEY,
    SWARM,
    TRAINER,
    TRAINER_KEY,
    Swarm,
    base_weights,
    clone,
    manifest,
    same_bits,
)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def poisoned(weights, pattern: int):
    """A copy of `weights` with one element of one tensor set to a bf16 bit pattern."""
    out = clone(weights)
    out["layer.weight"].view(torch.int16)[3, 4] = torch.tensor(pattern).to(torch.int16)
    return out


def fetched(s: Swarm) -> list[tuple[int, int]]:
    """(from, to) of the payloads the follower fetched in full since the last call."""
    return [(e.from_version, e.to_version) for e in s.publisher.served_events()]


# --------------------------------------------------------------------------- bad weights


@pytest.mark.parametrize("pattern", [0x7FC0, 0x7F80, 0xFF80])  # NaN, +inf, -inf
def test_a_signed_delta_of_nan_or_inf_weights_is_refused_and_to_be_remembered(pattern):
    s = Swarm()
    before = clone(s.follower.weights)
    s.weights, s.version = poisoned(s.weights, pattern), 1
    s.publisher.publish(s.weights, 1)  # hashed and signed as honestly as any
    result = s.sync()
    assert [(e.status, e.reason) for e in result.events] == [("rejected", "non_finite")]
    assert result.refused == [s.publisher.served()[-1].payload_hash]
    assert s.follower.version == 0 and same_bits(s.follower.weights, before)
    assert fetched(s) == [(0, 1)]
    assert s.sync().events == [] and fetched(s) == []  # never fetched again


def test_a_payload_refused_before_is_never_fetched_by_a_new_follower():
    s = Swarm(subscribe=False)
    s.weights, s.version = poisoned(s.weights, 0x7FC0), 1
    s.publisher.publish(s.weights, 1)
    refused = s.sync().refused
    fresh = Swarm(subscribe=False, refused=refused)  # what a restarted node reads back
    fresh.publisher = s.publisher
    fresh.follower.transport = s.follower_t
    assert fresh.follower.sync().events == [] and fetched(s) == [(0, 1)]


def test_a_model_check_that_fails_undoes_the_step_and_refuses_it_for_good():
    s = Swarm()
    s.train()
    before = clone(s.follower.weights)
    loads = []

    def load(names):
        loads.append((set(names), same_bits(s.follower.weights, s.weights)))
        return "logits not finite" if len(loads) == 1 else None

    result = s.follower.sync(load=load)
    assert [(e.status, e.reason) for e in result.events] == [("rejected", "broken_model")]
    # Loaded once with the new weights (refused), once more with the old ones put back.
    assert [ok for _, ok in loads] == [True, False] and loads[0][0] == loads[1][0]
    assert same_bits(s.follower.weights, before) and s.follower.version == 0
    assert result.refused == [s.publisher.served()[-1].payload_hash]


def test_a_payload_for_other_tensors_is_refused_by_its_header():
    s = Swarm()
    other = dict(base_weights(), extra=torch.zeros(4, dtype=torch.bfloat16))
    blob = encode_anchor(other, version=5)
    s.trainer_t.serve_blob("sync/0f0f0f0f0f0f0f0f/anchor/5", blob)
    good = manifest(kind="anchor", from_version=-1, to_version=5, size=len(blob))
    m = msgspec.structs.replace(
        good, key="sync/0f0f0f0f0f0f0f0f/anchor/5", result_hash=_result_hash(blob)
    )
    s.trainer_t.publish(delta_topic(SWARM), pack_manifests([sign_manifest(m, TRAINER_KEY)]))
    result = s.sync()
    assert [(e.status, e.reason) for e in result.events] == [("rejected", "wrong_tensors")]
    assert "unknown ['extra']" in result.events[0].detail
    assert s.follower.version == 0 and fetched(s) == []  # refused before it was served in full


# --------------------------------------------------------------------------- the payload check


def test_payload_check_refuses_a_size_other_than_the_signed_one():
    m = manifest(size=1300)
    check = PayloadCheck(m, {k: t.shape for k, t in base_weights().items()})
    check.size(1300)
    with pytest.raises(RejectedMessage, match="1073741824 bytes, the signed manifest says 1300"):
        check.size(1 << 30)


def test_payload_check_reads_only_the_header_and_names_what_differs():
    weights = base_weights()
    shapes = {k: t.shape for k, t in weights.items()}
    blob = encode_anchor(weights, version=5)
    m = manifest(kind="anchor", from_version=-1, to_version=5, size=len(blob))
    m = msgspec.structs.replace(m, result_hash=_result_hash(blob))
    check = PayloadCheck(m, shapes)
    assert check.head(b"") == 10
    end = check.head(blob[:10])
    assert 10 < end < len(blob)
    assert check.head(blob[:end]) == end  # satisfied: the rest is read without it
    wrong = PayloadCheck(m, {**shapes, "layer.weight": (16, 17)})
    with pytest.raises(RejectedMessage, match="shape mismatch for 'layer.weight'") as e:
        wrong.head(blob[:end])
    assert e.value.reason == "wrong_tensors"
    later = PayloadCheck(msgspec.structs.replace(m, to_version=6), shapes)
    with pytest.raises(RejectedMessage) as e:
        later.head(blob[:end])
    assert e.value.reason == "manifest_mismatch"
    with pytest.raises(RejectedMessage) as e:
        check.head(b"GARBAGE!!!")
    assert e.value.reason == "undecodable"
    huge = bytearray(blob[:10])
    huge[6:10] = (1 << 30).to_bytes(4, "little")  # a header of 1 GiB for a 4-tensor model
    with pytest.raises(RejectedMessage, match="a header of 1073741824 bytes") as e:
        check.head(bytes(huge))


def _result_hash(blob: bytes) -> str:
    from swarm.policy.delta import read_header

    return read_header(blob).result_hash.hex()


# --------------------------------------------------------------------------- slow trainers


class Throttled:
    """The follower's transport to a trainer that serves payloads at 1 byte per 2 s: each
    payload fetch runs until the rate floor ends it (its grace, plus the time of the bytes it
    got), on a fake clock, and fails as the libp2p transport then does."""

    def __init__(self, inner: MemoryTransport, clock: Clock) -> None:
        self.inner = inner
        self.clock = clock
        self.payload_fetches: list[tuple[str, float]] = []

    def fetch_blob(self, peer_id, key, timeout=30.0, limits=None):
        if "/index" in key:
            return self.inner.fetch_blob(peer_id, key, timeout, limits)
        self.payload_fetches.append((key, timeout))
        spent = min(timeout, limits.grace_s + 2.0) if limits.min_rate > 0 else timeout
        self.clock.t += spent
        raise FetchTooSlow(f"3 bytes in {spent:.1f} s: below the floor")


def test_a_trainer_serving_a_byte_every_2_s_costs_seconds_once_then_backs_off():
    clock = Clock()
    s = Swarm(clock=clock)
    s.train()
    slow = s.follower.transport = Throttled(s.follower_t, clock)
    spent, tried = [], []
    for r in range(12):  # rounds 3 s apart
        t0, before = clock.t, len(slow.payload_fetches)
        result = s.sync()
        spent.append(clock.t - t0)
        tried += [r] * (len(slow.payload_fetches) - before)
        clock.t += 3.0
    assert max(spent) <= s.follower.grace_s + 2.0  # not the 120 s of the whole deadline
    # Each failed try costs 7 s and waits 2, 4, 8 s more before the next: not every round.
    assert tried == [0, 1, 3, 6]
    assert s.follower.backoff.failures((TRAINER, "delta", 0, 1)) == 4
    assert [e.reason for e in result.events] == [] and result.version == 0


def test_one_sync_never_fetches_longer_than_its_budget():
    clock = Clock()
    s = Swarm(clock=clock, budget_s=20.0, min_rate=0.0)  # no rate floor: each try times out
    s.train(6)
    s.follower.transport = Throttled(s.follower_t, clock)
    t0 = clock.t
    result = s.sync()
    assert clock.t - t0 <= 20.0 + 0.1
    assert [e.reason for e in result.events] == ["fetch_too_slow"]  # one try used it all
    assert s.follower.budget_spent == 0  # nothing else was usable (backed off)


# --------------------------------------------------------------------------- unservable versions


def test_an_anchor_announced_and_never_served_gives_way_to_the_served_deltas():
    clock = Clock()
    s = Swarm(clock=clock)
    s.train(2)
    far = manifest(
        kind="anchor", from_version=-1, to_version=10**9, size=100, key="sync/x/anchor/far"
    )
    s.trainer_t.publish(delta_topic(SWARM), pack_manifests([sign_manifest(far, TRAINER_KEY)]))
    result = s.sync()
    assert [(e.kind, e.status, e.reason) for e in result.events] == [
        ("anchor", "rejected", "fetch_failed"),
        ("delta", "applied", ""),
        ("delta", "applied", ""),
    ]
    assert result.version == 2 and same_bits(s.follower.weights, s.weights)
    clock.t += 1.0  # the next round: the anchor is backed off, the deltas go on
    s.train()
    assert [(e.kind, e.status) for e in s.sync().events] == [("delta", "applied")]
    clock.t += 2.0  # its back-off over, one more try, and the chain still wins after it
    s.train()
    assert [(e.kind, e.reason) for e in s.sync().events] == [
        ("anchor", "fetch_failed"),
        ("delta", ""),
    ]
    assert s.follower.version == 4


# --------------------------------------------------------------------------- peers not followed


def test_manifests_of_a_peer_not_followed_are_counted_not_recorded_one_by_one():
    clock = Clock()
    s = Swarm(clock=clock)
    s.train()
    s.sync()
    theirs = [
        sign_manifest(manifest(provider=MALLORY, from_version=i, to_version=i + 1), MALLORY_KEY)
        for i in range(100)
    ]
    mallory = MemoryTransport(MALLORY, s.hub)
    mallory.start()
    for _ in range(200):
        mallory.publish(delta_topic(SWARM), pack_manifests(theirs))
    result = s.sync()
    assert [(e.peer, e.reason) for e in result.events] == [(MALLORY, "not_followed")]
    assert s.follower.limiter.totals()[(MALLORY, "not_followed")] == 20_000
    clock.t += 61.0  # a minute later, one more row, saying how many were only counted
    mallory.publish(delta_topic(SWARM), pack_manifests(theirs))
    events = s.sync().events
    assert len(events) == 1 and "19999 more like it" in events[0].detail
    s.train()  # the followed trainer is still followed
    assert [e.status for e in s.sync().events] == ["applied"]


# --------------------------------------------------------------------------- the pure parts


def test_backoff_doubles_up_to_its_cap_and_forgets_on_success():
    b = Backoff(base_s=2.0, cap_s=10.0, max_keys=2)
    assert [b.failed("k", 0.0) for _ in range(5)] == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert not b.ready("k", 9.9) and b.ready("k", 10.0)
    b.succeeded("k")
    assert b.ready("k", 0.0) and b.failures("k") == 0
    for key in ("a", "b", "c"):
        b.failed(key, 0.0)
    assert b.keys() == ["b", "c"]  # bounded: the oldest is forgotten


def test_refusal_limiter_records_once_per_window_and_counts_the_rest():
    limiter = RejectionLimiter(window_s=60.0, max_keys=2)
    assert limiter.admit("p", "r", 0.0) == 0
    assert [limiter.admit("p", "r", t) for t in (1.0, 2.0, 59.0)] == [None, None, None]
    assert limiter.admit("p", "r", 60.0) == 3 and limiter.unrecorded == 3
    assert limiter.admit("p", "other", 60.0) == 0
    assert limiter.totals() == {("p", "r"): 5, ("p", "other"): 1}
    limiter.admit("q", "r", 61.0)  # a third pair: the least recent is forgotten
    assert set(limiter.totals()) == {("p", "other"), ("q", "r")}


def test_an_index_announced_larger_than_any_manifests_message_is_refused_unread():
    clock = Clock()
    s = Swarm(clock=clock, subscribe=False)
    s.train()
    s.trainer_t.serve_blob("sync/0f0f0f0f0f0f0f0f/index", b"\x00" * (600 * 1024))
    result = s.sync()
    assert [(e.status, e.reason) for e in result.events] == [("rejected", "oversize")]
    assert "an index of 614400 bytes" in result.events[0].detail
    assert s.sync().events == []  # backed off: not asked again at once
