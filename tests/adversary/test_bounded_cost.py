"""Attacks that cost the victim work or records, each bounded: a real node on libp2p keeps its
pace while a member of its swarm sends what it may legally send, or nearly.

The victim (`victim_node.py`) runs every verification and ledger setting at its default, and
lists two datasets besides its own mix in `verify.task_catalogue` (as a swarm may agree on):
`countdown`, whose scorer evaluates the answer with sympy, and `spell_backward`, whose
dataset holds a ~10 MB word list per seed. Each attacker is a separate process
(`hostile_peer.py`) with its own identity, or, for what only a raw stream can send, a
libp2p host in this process. Every test asserts that

- the victim keeps finishing rounds, the median round under attack within 2x of the
  median before it (the victim's own rounds, from its ledger);
- its memory stays bounded (this process's RSS; the verification worker's own peak);
- the attacker's messages are refused with a reason, stored or counted in the ledger;
- the attacker is penalised (its reputation, a ban, or its GossipSub score).

The figures each test measures are printed (`pytest -s` shows them).
"""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import msgspec
import pytest
from libp2p.pubsub.pb import rpc_pb2

from swarm.core.identity import create_identity, peer_id_of, save_identity
from swarm.core.reasons import Reason
from swarm.p2p.libp2p import MAX_MESSAGE_SIZE, Libp2pTransport, TransportSettings
from swarm.p2p.libp2p.testing import rpc_frame, signed_message, unsigned_message
from swarm.tasks import EASY_MIX, TaskSpec, build_task
from swarm.verify.bans import ban
from swarm.verify.rescore import rescore
from swarm.wire import RolloutGroup, Sampling, pack_messages, rollout_topic
from swarm.wire.signing import sign_group
from tests.adversary.test_hostile_peer import Hostile
from tests.adversary.transport_attack import GOSSIP_PROTOCOL
from tests.adversary.victim_node import VictimNode, retained_rss_mb
from tests.waiting import wait_for

CATALOGUE = [{"dataset": "countdown", "config": {}}, {"dataset": "spell_backward", "config": {}}]
TOPIC = rollout_topic("swarm-local")
BASELINE_ROUNDS = 3
ATTACK_ROUNDS = 4
RSS_BOUND_MB = 150  # growth of the victim's process over one attack


@pytest.fixture(scope="module")
def victim(tmp_path_factory, tiny_model_path) -> Iterator[VictimNode]:
    node = VictimNode(tmp_path_factory.mktemp("victim"), verify={"task_catalogue": CATALOGUE})
    try:
        node.wait_rounds(2)  # past the first rounds' warm-up
        yield node
    finally:
        node.close()


class Attacker:
    """A hostile process with its own identity, meshed with the victim."""

    def __init__(self, victim: VictimNode, tmp_path, seed: int):
        self.key = create_identity(bytes([seed]) * 32)
        self.peer_id = peer_id_of(self.key)
        path = tmp_path / f"attacker-{seed}.key"
        save_identity(self.key, path)
        self.process = Hostile(path, victim.addrs, TOPIC)
        assert self.process.call(cmd="wait_mesh", n=1, timeout=30)["mesh"]

    def group(
        self,
        dataset: str,
        config: dict,
        index: int,
        completions: tuple[str, ...],
        *,
        seed: int = 11,
        claims: tuple[float, ...] | None = None,
        question: str | None = None,
    ) -> RolloutGroup:
        """A group of this attacker's; honest claims unless `claims` are given."""
        spec = TaskSpec.make(dataset, config, seed=seed, index=index)
        n = len(completions)
        group = RolloutGroup(
            swarm_id="swarm-local",
            sender=self.peer_id,
            task=spec,
            question=question if question is not None else build_task(spec).question,
            completions=completions,
            rewards=claims or (0.0,) * n,
            finished=(True,) * n,
            model="swarm-tiny",
            base_hash="00" * 16,
            policy_version=0,
            sampling=Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8),
            round=index,
            created_at=time.time(),
            nonce=os.urandom(16),
            format_bonus=0.1,
        )
        if claims is None:
            group = msgspec.structs.replace(group, rewards=rescore(group, 0.1)[1])
        return group

    def send(self, groups: list[RolloutGroup], copies: int = 1) -> None:
        """Each group in a message of its own (a bad one would take the others down with it)."""
        messages = [pack_messages([sign_group(g, self.key)])[0] for g in groups]
        for start in range(0, len(messages) * copies, 50):
            self.process.publish((messages * copies)[start : start + 50])

    def close(self) -> None:
        self.process.close()


@pytest.fixture
def attacker(victim, tmp_path, request) -> Iterator[Attacker]:
    seed = 0x50 + sum(map(ord, request.node.name)) % 150
    a = Attacker(victim, tmp_path, seed)
    yield a
    a.close()


@dataclass(frozen=True)
class Before:
    """The victim before an attack."""

    first: int  # the first round of the attack
    round_s: float  # median round before it
    rss_mb: float
    ledger_bytes: int  # in use at `first`
    ledger_per_round: float  # bytes its own rounds add to the ledger, per round


def baseline(victim: VictimNode) -> Before:
    start, at_start = victim.round, victim.ledger_bytes()
    end = victim.wait_rounds(BASELINE_ROUNDS)
    used = victim.ledger_bytes()
    return Before(
        end,
        victim.median_round(start, end),
        retained_rss_mb(),
        used,
        (used - at_start) / (end - start),
    )


def under_attack(victim: VictimNode, before: Before, what: str) -> int:
    """Wait out the attack's rounds; check the round-time and memory bounds. Returns the
    ledger bytes the attack added beyond what the victim's own rounds add."""
    last = victim.wait_rounds(ATTACK_ROUNDS, timeout=180)
    during = victim.round_seconds(before.first, last)
    median = sorted(during)[len(during) // 2]
    grown = retained_rss_mb() - before.rss_mb
    extra = (
        victim.ledger_bytes()
        - before.ledger_bytes
        - before.ledger_per_round * (last - before.first)
    )
    print(
        f"\n{what}: median round {before.round_s:.2f} s before, {median:.2f} s under attack "
        f"(x{median / before.round_s:.2f}, slowest {max(during):.2f} s); RSS {grown:+.0f} MB; "
        f"ledger {extra / 1024:+.0f} KB beyond the victim's own rounds"
    )
    assert median <= 2 * before.round_s, during
    assert grown < RSS_BOUND_MB
    return int(extra)


def outcomes(victim: VictimNode, peer: str) -> collections.Counter:
    """The peer's rejected groups by reason, stored or counted; accepted ones as "accepted"."""
    out = collections.Counter(reason or status for status, reason in victim.rows_from(peer))
    out.update(victim.counted_from(peer))
    return out


def settled(victim: VictimNode, peer: str, sent: int) -> bool:
    """Every message of `peer`'s counted one by one, or the rest skipped in whole RPCs once
    it went past its cost budget (then nothing more is counted for a second)."""
    got = outcomes(victim, peer)
    if sum(got.values()) >= sent:
        return True
    if not got["over_cost_budget"]:
        return False
    time.sleep(1.0)
    return outcomes(victim, peer) == got


def test_costly_task_specs(victim, attacker, tmp_path):
    before = baseline(victim)
    a = attacker
    # Listed datasets with configs outside the catalogue: refused on the spec, nothing built.
    unlisted = [
        a.group(
            "chain_sum",
            {**EASY_MIX[0].config, "max_terms": 1_000_000},
            1,
            ("1",),
            question="?",
            claims=(0.0,),
        ),
        a.group("count_primes", {"max_n": 100_000_000}, 2, ("1",), question="?", claims=(0.0,)),
        a.group("countdown", {"max_numbers": 500}, 3, ("1",), question="?", claims=(0.0,)),
    ]
    # A listed dataset whose datasets weigh ~10 MB a seed, a new seed per group (rebuilt in the
    # worker, whose cache is bounded in bytes; the question is the attacker's, so each fails).
    heavy = [
        a.group("spell_backward", {}, i, ("x",), seed=1000 + i, question="?", claims=(0.0,))
        for i in range(30)
    ]
    # Within the catalogue, but slow: sympy computes 9**43046721 (a minute of CPU unbounded);
    # from a second attacker, whose share of verification time the first did not spend.
    b = Attacker(victim, tmp_path, 0x31)
    try:
        slow = [
            b.group("countdown", {}, 100 + i, ("<answer>9**9**8</answer>",), claims=(0.0,))
            for i in range(3)
        ]
        a.send(unlisted + heavy)
        b.send(slow)
        wait_for(
            lambda: sum(outcomes(victim, a.peer_id).values()) >= 33,
            120,
            "the first attacker's outcomes",
        )
        wait_for(
            lambda: sum(outcomes(victim, b.peer_id).values()) >= 3, 120, "the slow groups' outcomes"
        )
        under_attack(victim, before, "costly task specs")
    finally:
        b.close()

    got, slowed = outcomes(victim, a.peer_id), outcomes(victim, b.peer_id)
    print(f"outcomes: {dict(got)}, {dict(slowed)}; worker: {victim.node.verifier.rescorer.stats}")
    assert got["unlisted_task"] == 3
    assert got["question_mismatch"] >= 3 and got["question_mismatch"] + got["verify_budget"] == 30
    assert slowed["verify_timeout"] >= 1 and slowed["verify_timeout"] + slowed["verify_budget"] == 3
    worker = victim.node.verifier.rescorer.stats
    assert worker.timeouts >= 1 and worker.peak_rss_mb < victim.config.verify.worker_memory_mb / 2
    for peer in (a.peer_id, b.peer_id):
        record = victim.node.verifier.reputation.record(peer)
        assert record.hard_penalty >= 1 and record.score < 1.0


def test_crafted_answer_tags(victim, attacker):
    before = baseline(victim)
    a = attacker
    config = dict(EASY_MIX[0].config)
    crafted = (
        "<answer>" * 4000,  # 32 KB of tags never closed
        "<answer>1</answer>" * 1800,  # 32 KB of closed ones
        "<answer>" + "1" * 32_000,
        "</answer><answer>" * 1900,
    )
    honest = [a.group("chain_sum", config, 200 + i, crafted) for i in range(10)]  # claims right
    false = [a.group("chain_sum", config, 300 + i, crafted, claims=(1.1,) * 4) for i in range(10)]
    started = time.perf_counter()
    a.send(honest + false)
    wait_for(
        lambda: sum(outcomes(victim, a.peer_id).values()) >= 20, 120, "the crafted groups' outcomes"
    )
    print(
        f"\n20 crafted groups of {len(''.join(crafted)) // 1024} KB recorded in {time.perf_counter() - started:.1f} s"
    )
    under_attack(victim, before, "crafted answer tags")

    got = outcomes(victim, a.peer_id)
    assert got == {"accepted": 10, "reward_mismatch": 10}
    assert victim.node.verifier.reputation.record(a.peer_id).rejected[Reason.REWARD_MISMATCH] == 10


def test_duplicate_flood_of_a_valid_group(victim, attacker):
    before = baseline(victim)
    a = attacker
    task = build_task(TaskSpec.make("chain_sum", dict(EASY_MIX[0].config), seed=11, index=400))
    good = a.group(
        "chain_sum", dict(EASY_MIX[0].config), 400, (f"<answer>{task.answer}</answer>", "0")
    )
    copies = 400
    a.send([good], copies=copies)
    # Each copy is counted: as a duplicate, or, once the copies brought the attacker's
    # GossipSub score under the publish threshold, as refused by the transport; once they
    # cost it its budget, its RPCs are skipped unparsed (a count per RPC, not per copy).
    wait_for(lambda: settled(victim, a.peer_id, copies), 120, "every copy to be counted")
    extra = under_attack(victim, before, "duplicate flood")

    got = outcomes(victim, a.peer_id)
    print(f"outcomes: {dict(got)}")
    assert victim.rows_from(a.peer_id) == [("accepted", "")]  # one row: the group itself
    assert got["accepted"] == 1 and got["duplicate"] >= 10
    refused_one_by_one = got["duplicate"] + got["below_publish_score"]
    assert refused_one_by_one == copies - 1 or (
        refused_one_by_one < copies - 1 and got["over_cost_budget"] > 0
    )
    assert extra < 256 * 1024  # a few counters (400 rows of ~2 KB would be 800 KB)
    # GossipSub penalised it, or its cost budget graylisted it (and, past it, banned it:
    # then it is no longer a peer with a score)
    scores = victim.node.transport.peer_scores()
    assert scores.get(a.peer_id, 0.0) < 0 or got["over_cost_budget"] > 0


def test_a_banned_peer_that_keeps_sending(victim, attacker):
    a = attacker
    ban(victim.config.ledger_url, a.peer_id, "test")
    victim.wait_rounds(2)  # the node reads its bans every round
    before = baseline(victim)
    config = dict(EASY_MIX[0].config)
    valid = [a.group("chain_sum", config, 500 + i, ("<answer>1</answer>", "2")) for i in range(300)]
    a.send(valid)
    wait_for(lambda: settled(victim, a.peer_id, len(valid)), 120, "every group to be counted")
    extra = under_attack(victim, before, "banned peer")

    got = outcomes(victim, a.peer_id)
    print(f"outcomes: {dict(got)}")
    assert victim.rows_from(a.peer_id) == []
    assert set(got) <= {"banned", "below_publish_score", "over_cost_budget"}
    one_by_one = got["banned"] + got["below_publish_score"]
    assert got["banned"] >= 10
    assert one_by_one == len(valid) or (one_by_one < len(valid) and got["over_cost_budget"] > 0)
    assert extra < 256 * 1024  # a few counters (300 rows of ~2 KB would be 600 KB)
    assert a.peer_id in victim.banned()
    scores = victim.node.transport.peer_scores()
    assert scores.get(a.peer_id, 0.0) < 0 or got["over_cost_budget"] > 0


def test_what_the_transport_refuses_is_recorded_and_penalised(victim, tmp_path):
    """Unsigned and oversize gossip, which only a raw stream sends: refused by the transport,
    counted in the victim's ledger under the peer that sent it, and held against it."""
    before = baseline(victim)
    key = create_identity(b"\x66" * 32)
    peer = peer_id_of(key)
    joining = TransportSettings(topics=(TOPIC,), bootstrap=tuple(victim.addrs), peer_exchange=False)
    host = Libp2pTransport(joining, key_pair=key)
    host.start()
    try:
        assert host.wait_for_topic_peers(TOPIC, 1, timeout=30) == 1
        stream = host.open_raw_stream(victim.peer_id, GOSSIP_PROTOCOL)
        for i in range(20):
            stream.write(rpc_frame(rpc_pb2.RPC(publish=[unsigned_message(key, TOPIC, b"u%d" % i)])))
        for _ in range(3):
            big = signed_message(key, TOPIC, b"B" * (MAX_MESSAGE_SIZE + 1))
            stream.write(rpc_frame(rpc_pb2.RPC(publish=[big])))
        wanted = {"unsigned_message": 20, "oversize_message": 3}
        wait_for(lambda: victim.counted_from(peer) == wanted, 60, "the refusals to be counted")
        under_attack(victim, before, "transport refusals")
    finally:
        host.close()
    assert victim.rows_from(peer) == []
    record = victim.node.verifier.reputation.record(peer)
    assert (
        record.rejected[Reason.UNSIGNED_MESSAGE] == 20
        and record.rejected[Reason.OVERSIZE_MESSAGE] == 3
    )
    assert record.score < 0.1
    refused = victim.node.sharing.stats.refused_by_reason  # this run's totals, all attackers'
    assert refused[Reason.UNSIGNED_MESSAGE] >= 20 and refused[Reason.OVERSIZE_MESSAGE] >= 3
