"""swarm.sync.rules: a trainer publishes deltas, a follower applies them bit-exactly, over MemoryTransport.

Nothing the followed trainer (or anyone else) sends is trusted: every refusal below must
leave the follower's weights bit-identical and produce an event with a reason code.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pytest
import torch

from swarm.core.identity import create_identity, peer_id_of
from swarm.node.delta_sync import load_into
from swarm.p2p.topic_tap import TopicTap
from swarm.p2p.transport import InboundMessage, MemoryHub, MemoryTransport
from swarm.policy.delta import bf16_state_dict, weights_hash
from swarm.sync.follower import DeltaFollower
from swarm.sync.publisher import DeltaPublisher
from swarm.sync.rules import Expectation, plan_catch_up
from swarm.wire import DeltaManifest, delta_topic, pack_manifests
from swarm.wire.signing import sign_manifest

SWARM = "swarm-test"
TRAINER_KEY = create_identity(b"\x11" * 32)
MALLORY_KEY = create_identity(b"\x22" * 32)
TRAINER, MALLORY = peer_id_of(TRAINER_KEY), peer_id_of(MALLORY_KEY)
BASE = "0f" * 32


def base_weights() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    emb = (0.02 * torch.randn(64, 16, generator=gen)).to(torch.bfloat16)
    return {
        "embed.weight": emb,
        "lm_head.weight": emb,  # tied
        "layer.weight": (0.02 * torch.randn(16, 16, generator=gen)).to(torch.bfloat16),
        "norm.weight": torch.ones(16, dtype=torch.bfloat16),
    }


def clone(weights):
    out, seen = {}, {}
    for name, t in weights.items():
        key = t.untyped_storage().data_ptr()
        seen.setdefault(key, t.clone())
        out[name] = seen[key]
    return out


def step(weights, rng, density=0.05):
    """A copy with a share of the bits nudged by one ulp (what a small RL step does to bf16)."""
    new = clone(weights)
    for t in {id(t): t for t in new.values()}.values():
        bits = t.view(torch.int16).numpy().reshape(-1)
        idx = np.flatnonzero(rng.random(bits.size) < density)
        bits[idx] += 1
    return new


def same_bits(a, b) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k].view(torch.int16), b[k].view(torch.int16)) for k in a
    )


class Swarm:
    """A trainer with a publisher and a follower, joined by a MemoryHub."""

    def __init__(
        self, anchor_every=100, keep_deltas=100, max_bytes=1 << 20, subscribe=True, **follower
    ):
        self.hub = MemoryHub()
        self.trainer_t = MemoryTransport(TRAINER, self.hub)
        self.follower_t = MemoryTransport("follower", self.hub)
        self.trainer_t.start()
        self.follower_t.start()
        self.publisher = DeltaPublisher(
            self.trainer_t,
            TRAINER_KEY,
            peer_id=TRAINER,
            swarm_id=SWARM,
            model="m",
            base_hash=BASE,
            anchor_every=anchor_every,
            keep_deltas=keep_deltas,
        )
        self.expect = Expectation(TRAINER, SWARM, "m", BASE, max_bytes)
        self.follower = DeltaFollower(
            self.follower_t, self.expect, clone(base_weights()), **follower
        )
        self.tap = TopicTap(self.follower_t, delta_topic(SWARM), self.follower.offer)
        if subscribe:
            self.tap.subscribe(delta_topic(SWARM), self.follower.validator)
        self.weights = base_weights()
        self.version = 0
        self.publisher.start(self.weights, 0)
        self.rng = np.random.default_rng(1)

    def train(self, n=1):
        for _ in range(n):
            self.weights, self.version = step(self.weights, self.rng), self.version + 1
            self.publisher.publish(self.weights, self.version)

    def sync(self):
        assert self.tap.receive() == []  # every delta-topic message went to the follower
        return self.follower.sync()


def test_follower_tracks_the_trainer_bit_for_bit():
    s = Swarm()
    for _ in range(4):
        s.train()
        result = s.sync()
        assert result.version == s.version == s.follower.version
        assert same_bits(s.follower.weights, s.weights)
        assert [(e.status, e.kind, e.to_version) for e in result.events] == [
            ("applied", "delta", s.version)
        ]
        assert (
            result.changed and "lm_head.weight" in result.changed
        )  # tied name reported with its tensor
    assert weights_hash(s.follower.weights) == weights_hash(s.weights)
    assert s.sync().events == []  # nothing new: no fetch, no event


def test_a_follower_that_missed_versions_pulls_the_chain_from_the_index():
    s = Swarm(subscribe=False)  # hears no gossip at all
    s.train(5)
    result = s.sync()
    assert [(e.kind, e.from_version, e.to_version) for e in result.events] == [
        ("delta", i, i + 1) for i in range(5)
    ]
    assert same_bits(s.follower.weights, s.weights) and result.version == 5


def test_the_publisher_counts_what_followers_fetched_in_full():
    s = Swarm(subscribe=False)
    s.train(3)
    assert s.publisher.served_events() == []  # announced, not yet fetched
    s.sync()  # pulls the index (not a delivery of weights) and the three deltas
    served = s.publisher.served_events()
    assert [
        (e.direction, e.peer, e.kind, e.from_version, e.to_version, e.status) for e in served
    ] == [("sent", "follower", "delta", i, i + 1, "served") for i in range(3)]
    sizes = {m.to_version: m.size for m in s.publisher.served()}
    assert all(e.nbytes == sizes[e.to_version] for e in served)
    assert s.publisher.served_events() == []  # drained


def test_a_fetch_that_outlives_its_blob_still_counts_and_unknown_keys_do_not():
    s = Swarm(keep_deltas=1)
    s.train(1)
    key = s.publisher.served()[0].key
    blob = s.follower_t.fetch_blob(TRAINER, key)
    s.train(2)  # the fetched delta is rotated out of what is served
    s.trainer_t.serve_blob("someone-elses-key", b"x")
    s.follower_t.fetch_blob(TRAINER, "someone-elses-key")
    served = s.publisher.served_events()
    assert [(e.to_version, e.nbytes) for e in served] == [(1, len(blob))]


def test_a_late_joiner_starts_from_the_latest_anchor():
    s = Swarm(anchor_every=3, keep_deltas=3)
    s.train(7)  # anchors at 3 and 6 (only 6 still served); deltas 4->5, 5->6, 6->7 served
    served = s.publisher.served()
    assert [(m.kind, m.to_version) for m in served] == [
        ("anchor", 6),
        ("delta", 5),
        ("delta", 6),
        ("delta", 7),
    ]
    result = s.sync()
    assert [(e.kind, e.to_version) for e in result.events] == [("anchor", 6), ("delta", 7)]
    assert same_bits(s.follower.weights, s.weights)
    # The trainer stopped serving what it no longer lists.
    with pytest.raises(Exception, match="serves no blob"):
        s.follower_t.fetch_blob(TRAINER, "sync/0f0f0f0f0f0f0f0f/delta/0-1")


def test_resumed_trainer_serves_an_anchor_at_start():
    hub = MemoryHub()
    t = MemoryTransport(TRAINER, hub)
    t.start()
    pub = DeltaPublisher(
        t,
        TRAINER_KEY,
        peer_id=TRAINER,
        swarm_id=SWARM,
        model="m",
        base_hash=BASE,
        anchor_every=10,
        keep_deltas=10,
    )
    weights = step(base_weights(), np.random.default_rng(3))
    events = pub.start(weights, 12)
    assert [(e.kind, e.to_version, e.status) for e in events] == [("anchor", 12, "published")]
    f = MemoryTransport("f", hub)
    f.start()
    follower = DeltaFollower(
        f, Expectation(TRAINER, SWARM, "m", BASE, 1 << 20), clone(base_weights())
    )
    assert follower.sync().version == 12 and same_bits(follower.weights, weights)


def test_plan_prefers_the_chain_and_falls_back_to_the_anchor():
    def d(a, b, size=10):
        return manifest(from_version=a, to_version=b, size=size, key=f"{a}-{b}")

    def anchor(v, size=1000):
        return msgspec.structs.replace(d(0, v, size), kind="anchor", from_version=-1)

    assert plan_catch_up(2, [d(2, 3), d(3, 4), anchor(3)]) == [d(2, 3), d(3, 4)]
    assert plan_catch_up(0, [d(2, 3), d(3, 4), anchor(3)]) == [anchor(3), d(3, 4)]
    assert plan_catch_up(0, [d(0, 1), anchor(5)]) == [anchor(5)]  # further beats cheaper
    assert plan_catch_up(4, [d(2, 3), d(3, 4), anchor(3)]) == []
    assert plan_catch_up(7, [anchor(5)]) == []  # never go back
    assert plan_catch_up(0, []) == []


def _gossip(s: Swarm, key, **changes) -> None:
    """Publish on the delta topic a manifest signed by `key` (defaults: a valid next delta)."""
    good = s.publisher.served()[-1]
    m = msgspec.structs.replace(good, **changes)
    s.trainer_t.publish(delta_topic(SWARM), pack_manifests([sign_manifest(m, key)]))


@pytest.mark.parametrize(
    "key, changes, code",
    [
        (MALLORY_KEY, {"provider": MALLORY}, "not_followed"),
        (TRAINER_KEY, {"swarm_id": "elsewhere"}, "wrong_swarm"),
        (TRAINER_KEY, {"base_hash": "aa" * 32}, "wrong_base"),
        (TRAINER_KEY, {"model": "other-model"}, "wrong_base"),
        (TRAINER_KEY, {"size": (1 << 20) + 1}, "oversize"),
    ],
)
def test_untrusted_manifests_are_refused_with_a_reason(key, changes, code):
    s = Swarm(subscribe=True)
    s.train()
    s.sync()
    before = clone(s.follower.weights)
    _gossip(s, key, **dict(changes, from_version=1, to_version=2))
    result = s.sync()
    assert [(e.status, e.reason) for e in result.events] == [("rejected", code)]
    assert result.version == 1 and same_bits(s.follower.weights, before)


def test_garbage_and_forged_gossip_is_refused_by_the_validator():
    s = Swarm()
    forged = sign_manifest(msgspec.structs.replace(_any(), provider=MALLORY), MALLORY_KEY)
    forged_body = pack_manifests([msgspec.structs.replace(forged, signature=b"\x00" * 64)])
    s.trainer_t.publish(delta_topic(SWARM), b"\x93junk")
    s.trainer_t.publish(delta_topic(SWARM), forged_body)
    assert s.follower_t.stats().rejected == {"undecodable": 1, "bad_signature": 1}
    reasons = sorted(e.reason for e in s.sync().events)
    assert reasons == ["bad_signature", "undecodable"]


def _any() -> DeltaManifest:
    return manifest()


def manifest(**fields) -> DeltaManifest:
    """A delta manifest by the trainer (0 -> 1 unless `fields` say otherwise)."""
    defaults = dict(
        swarm_id=SWARM,
        provider=TRAINER,
        model="m",
        base_hash=BASE,
        kind="delta",
        from_version=0,
        to_version=1,
        size=10,
        payload_hash="00" * 32,
        result_hash="00" * 32,
        key="k",
        created_at=1.0,
    )
    return DeltaManifest(**(defaults | fields))


def test_a_manifest_relayed_under_another_source_is_refused():
    s = Swarm()
    s.train()
    good = s.publisher.served()[-1]
    msg = InboundMessage(
        delta_topic(SWARM), pack_manifests([sign_manifest(good, TRAINER_KEY)]), MALLORY, 0.0
    )
    s.follower.offer(msg)
    reasons = [e.reason for e in s.follower.sync().events if e.status == "rejected"]
    assert reasons == ["sender_mismatch"]


def test_corrupt_or_substituted_payloads_are_never_applied():
    s = Swarm()
    s.train()
    m = s.publisher.served()[-1]
    blob = bytearray(s.follower_t.fetch_blob(TRAINER, m.key))
    blob[len(blob) // 2] ^= 0x40
    s.trainer_t.serve_blob(m.key, bytes(blob))  # served bytes differ from the signed hash
    before = clone(s.follower.weights)
    result = s.sync()
    assert [(e.status, e.reason) for e in result.events] == [("rejected", "bad_hash")]
    assert same_bits(s.follower.weights, before) and s.follower.version == 0
    # The refused payload is not fetched again.
    assert s.follower.sync().events == []


def test_a_delta_for_other_base_weights_is_rejected_and_rolled_back():
    """The followed trainer signs a valid delta, but from weights the follower does not hold."""
    s = Swarm()
    s.follower.weights["layer.weight"].view(torch.int16)[0, 0] += 7  # the follower drifted
    before = clone(s.follower.weights)
    s.train()
    result = s.sync()
    assert [(e.status, e.reason) for e in result.events] == [("rejected", "apply_failed")]
    assert same_bits(s.follower.weights, before) and s.follower.version == 0


def test_a_payload_that_contradicts_its_manifest_is_rejected():
    s = Swarm(subscribe=False)
    s.train(2)
    d01, d12 = s.publisher.served()
    # The trainer signs a manifest for 0->1 whose key serves the 1->2 payload (hash and size match it).
    blob = s.follower_t.fetch_blob(TRAINER, d12.key)
    lie = msgspec.structs.replace(d01, key=d12.key, size=d12.size, payload_hash=d12.payload_hash)
    s.trainer_t.serve_blob(
        "sync/0f0f0f0f0f0f0f0f/index", pack_manifests([sign_manifest(lie, TRAINER_KEY)])
    )
    assert len(blob) == lie.size
    result = s.sync()
    assert [(e.status, e.reason) for e in result.events] == [("rejected", "manifest_mismatch")]
    assert s.follower.version == 0


def test_an_unreachable_trainer_is_a_recorded_fetch_failure_not_a_crash():
    s = Swarm()
    s.train()
    s.trainer_t.close()  # gossip arrived, the trainer left before the fetch
    result = s.sync()
    assert [(e.status, e.reason) for e in result.events] == [("rejected", "fetch_failed")]
    assert s.follower.version == 0


def test_load_into_makes_the_models_bf16_view_equal(tiny_policy):
    import copy

    model = copy.deepcopy(tiny_policy.model)
    weights = bf16_state_dict(model)
    new = step(weights, np.random.default_rng(5), density=0.2)
    load_into(model, new, list(new))
    assert model.dtype == torch.float32
    assert weights_hash(bf16_state_dict(model)) == weights_hash(new)


def test_topic_tap_routes_manifests_and_keeps_everything_else_in_order():
    hub = MemoryHub()
    sender, receiver = MemoryTransport("s", hub), MemoryTransport("r", hub)
    sender.start()
    receiver.start()
    taken = []
    tap = TopicTap(receiver, "deltas", taken.append)
    tap.subscribe("deltas")
    tap.subscribe("rollouts")
    for i, topic in enumerate(["rollouts", "deltas", "rollouts", "deltas"]):
        sender.publish(topic, bytes([i]))
    tap.pump()  # the follower's manifests now, the node's rollouts later
    assert [m.data for m in taken] == [b"\x01", b"\x03"]
    sender.publish("rollouts", b"\x04")
    assert [m.data for m in tap.receive(max_messages=1)] == [b"\x00"]
    assert [m.data for m in tap.receive()] == [b"\x02"]
    assert [m.data for m in tap.receive()] == [b"\x04"]
    assert tap.peers() == receiver.peers() and tap.peer_id == "r"


def test_publisher_started_before_the_transport_counts_the_lost_gossip():
    t = MemoryTransport(TRAINER)  # not started: gossip fails, serving works
    pub = DeltaPublisher(
        t,
        TRAINER_KEY,
        peer_id=TRAINER,
        swarm_id=SWARM,
        model="m",
        base_hash=BASE,
        anchor_every=10,
        keep_deltas=10,
    )
    pub.start(base_weights(), 4)
    assert pub.publish_failures == 1 and [m.kind for m in pub.served()] == ["anchor"]


def test_a_gossiped_manifest_is_verified_once_by_the_validator_not_again(monkeypatch):
    import swarm.sync.manifest_inbox as sync_module

    verified = []
    real = sync_module.verify_manifest

    def counting(signed):
        verified.append(signed.body)
        return real(signed)

    monkeypatch.setattr(sync_module, "verify_manifest", counting)
    s = Swarm()
    s.train()
    assert len(verified) == 1  # the validator, on the gossip message
    result = s.sync()
    assert [(e.status, e.to_version) for e in result.events] == [("applied", 1)]
    # Taking the message from the inbox verified nothing again; the follower's first sync also
    # reads the trainer's index blob, whose one manifest is verified there.
    assert len(verified) == 2 and verified[0] == verified[1]
