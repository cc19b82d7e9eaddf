"""What an observer counts as received, accepted and rejected: one outcome per group.

An observer (no model) over the in-memory transport, and a peer that sends groups: one
that passes every check, one that passes the gossip validator but fails a round-loop check
(its claimed rewards are false), and the good one again (a duplicate).
"""

from __future__ import annotations

import time

import msgspec

from swarm.node import Observer
from swarm.p2p import MemoryHub, MemoryTransport
from swarm.p2p.identity import create_identity, peer_id_of
from swarm.signing import sign_group
from swarm.tasks import EASY_MIX, TaskSpec, build_task
from swarm.verify.rescore import rescore
from swarm.wire import RolloutGroup, Sampling, pack_messages, rollout_topic
from tests.conftest import small_config

PEER_KEY = create_identity(b"\x31" * 32)


def peer_group(index: int, created_at: float) -> RolloutGroup:
    """A group the peer could honestly send (its claimed rewards recomputed here)."""
    spec = TaskSpec.make("chain_sum", dict(EASY_MIX[0].config), seed=5, index=index)
    task = build_task(spec)
    group = RolloutGroup(
        swarm_id="swarm-local", sender=peer_id_of(PEER_KEY), task=spec, question=task.question,
        completions=(f"<answer>{task.answer}</answer>", "<answer>0</answer>"), rewards=(0.0, 0.0),
        finished=(True, True), model="swarm-tiny", base_hash="00" * 16, policy_version=0,
        sampling=Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8), round=index,
        created_at=created_at, nonce=index.to_bytes(16, "big"), format_bonus=0.1,
    )
    return msgspec.structs.replace(group, rewards=rescore(group, 0.1)[1])


def test_a_group_failing_a_round_loop_check_is_received_once(tmp_path):
    hub = MemoryHub()
    key = create_identity(b"\x32" * 32)
    config = small_config(tmp_path / "o", node={"role": "observer"})
    observer = Observer(config, transport=MemoryTransport(peer_id_of(key), hub), key_pair=key)
    peer = MemoryTransport(peer_id_of(PEER_KEY), hub)
    now = time.time()
    good = peer_group(1, now)
    false_claims = msgspec.structs.replace(peer_group(2, now), rewards=(1.1, 1.1))
    try:
        observer.start()
        peer.start()
        topic = rollout_topic("swarm-local")
        for group in (good, false_claims, good):
            peer.publish(topic, pack_messages([sign_group(group, PEER_KEY)])[0])
        sample = observer.observe()
    finally:
        observer.close()
        peer.close()
    assert sample.groups_received == 2  # the good group and the false one; the repeat is not new
    assert sample.groups_accepted == 1
    assert sample.rejected == {"reward_mismatch": 1, "duplicate": 1}
