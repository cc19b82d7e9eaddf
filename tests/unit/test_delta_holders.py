"""Deltas from any holder: the trainer sends each delta about once, whatever its followers;
a holder serving other bytes is refused and recorded, and every follower stays bit-exact."""

from __future__ import annotations

import random

from swarm.node.delta_holders import HolderRegistry, decode_hints, encode_hints, pick_holders
from swarm.ops.delta_sim import DeltaSimSettings, simulate_deltas
from swarm.p2p.transport import BlobServed, MemoryTransport
from swarm.wire import HolderHint


def test_followers_fetch_from_holders_and_the_trainer_sends_each_delta_about_once():
    holders = simulate_deltas(DeltaSimSettings(followers=12, versions=3, params=4096, hold=4))
    alone = simulate_deltas(DeltaSimSettings(followers=12, versions=3, params=4096, hold=0))
    assert holders["all_in_step"] and alone["all_in_step"]
    assert alone["trainer_payloads_per_version"] == 12
    assert holders["trainer_payloads_per_version"] <= 3
    assert holders["from_holders"] >= 3 * (12 - 3)


def test_a_holder_serving_other_bytes_is_refused_and_everyone_still_gets_the_delta():
    r = simulate_deltas(
        DeltaSimSettings(followers=10, versions=4, params=4096, hold=4, bad_holders=3, seed=3)
    )
    assert r["all_in_step"]
    assert sum(v["bad_holder_refusals"] for v in r["versions"]) > 0


def test_the_registry_names_the_newest_holders_of_the_newest_payloads():
    transport = MemoryTransport("trainer")
    registry = HolderRegistry(transport, "b" * 64)
    registry.note((BlobServed(f"f{i}", "k", 1), "a" * 64) for i in range(12))
    assert registry.holders("a" * 64) == [f"f{i}" for i in range(4, 12)]
    hints = decode_hints(encode_hints(registry.hints()))
    assert hints == registry.hints() and decode_hints(b"junk") == []
    picked = pick_holders(
        [("me", ()), ("trainer", ()), ("x", ()), ("y", ())],
        "me",
        "trainer",
        random.Random(0),
    )
    assert sorted(p for p, _ in picked) == ["x", "y"]
    assert HolderHint("a" * 64, "f4", ()) in hints
