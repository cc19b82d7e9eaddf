"""The transport's pure limits: control budgets, refusal summaries, the inbound budget."""

from __future__ import annotations

import trio
from libp2p.peer.id import ID

from swarm.core.identity import create_identity
from swarm.p2p.libp2p import control_budget as cb
from swarm.p2p.libp2p.inbound import InboundBudget
from swarm.p2p.libp2p.refusals import RefusalRecorder
from swarm.p2p.libp2p.stats import Counters
from swarm.p2p.transport import Refusal, RefusalReason


def test_an_iwant_is_answered_at_most_three_times_per_peer_and_id() -> None:
    budget = cb.ControlBudget()
    answers = [budget.admit_iwant("p", b"id", 100) for _ in range(10)]
    assert answers == [True] * cb.GOSSIP_RETRANSMISSION + [False] * 7
    assert budget.admit_iwant("q", b"id", 100)  # another peer has its own count
    budget.new_heartbeat()
    assert not budget.admit_iwant("p", b"id", 100)  # still remembered while cached
    for _ in range(cb.REMEMBER_HEARTBEATS):
        budget.new_heartbeat()
    assert budget.admit_iwant("p", b"id", 100)  # forgotten once out of the cache


def test_iwant_answers_stop_at_the_byte_budget_until_the_next_heartbeat() -> None:
    budget = cb.ControlBudget()
    size = cb.IWANT_BYTES_PER_HEARTBEAT // 2
    assert [budget.admit_iwant("p", bytes([i]), size) for i in range(3)] == [True, True, False]
    budget.new_heartbeat()
    assert budget.admit_iwant("p", bytes([9]), size)


def test_ihave_is_looked_at_within_ten_messages_and_5000_ids_per_heartbeat() -> None:
    budget = cb.ControlBudget()
    assert budget.admit_ihave("p", 3000) == 3000
    assert budget.admit_ihave("p", 3000) == 2000
    assert budget.admit_ihave("p", 10) == 0
    assert [budget.admit_ihave("q", 1) for _ in range(11)] == [1] * 10 + [0]
    budget.new_heartbeat()
    assert budget.admit_ihave("p", 10) == 10


def test_one_prune_reply_per_peer_topic_and_heartbeat() -> None:
    budget = cb.ControlBudget()
    assert budget.admit_prune_reply("p", "t") and not budget.admit_prune_reply("p", "t")
    assert budget.admit_prune_reply("p", "u")
    budget.new_heartbeat()
    assert budget.admit_prune_reply("p", "t")


def test_refusals_are_all_counted_and_reported_once_a_second_with_a_count() -> None:
    now = [0.0]
    counters = Counters()
    reports: list[Refusal] = []
    recorder = RefusalRecorder(counters, clock=lambda: now[0])
    recorder.set_hook(reports.append)
    for _ in range(100):
        recorder.note("p", RefusalReason.CONTROL_FLOOD, "IHAVE over budget")
    recorder.note("q", RefusalReason.OVERSIZE, "big", source="s", topic="t")
    assert counters.snapshot(0).peer_refusals == {
        "gossip_control_flood": 100,
        "oversize_message": 1,
    }
    assert [(r.peer_id, r.count) for r in reports] == [("p", 1), ("q", 1)]
    assert reports[1].source == "s" and reports[1].topic == "t"
    recorder.flush()
    assert len(reports) == 2  # within the second: nothing more yet
    now[0] = 1.5
    recorder.flush()
    assert (reports[-1].peer_id, reports[-1].count) == ("p", 99)


def test_a_hook_that_raises_is_counted_not_fatal() -> None:
    counters = Counters()
    recorder = RefusalRecorder(counters)

    def broken(rejection: Refusal) -> None:
        raise RuntimeError("node bug")

    recorder.set_hook(broken)
    recorder.note("p", RefusalReason.UNSIGNED)
    stats = counters.snapshot(0)
    assert stats.peer_refusals["unsigned_message"] == 1
    assert stats.handler_errors["refusal_hook:RuntimeError"] == 1


def test_the_inbound_budget_holds_a_peer_back_and_only_that_peer() -> None:
    peer = ID.from_pubkey(create_identity().public_key)
    other = ID.from_pubkey(create_identity().public_key)

    async def main() -> None:
        budget = InboundBudget(max_messages=2, max_bytes=1000)
        await budget.acquire(peer, 600)
        with trio.move_on_after(0.1) as blocked:
            await budget.acquire(peer, 600)  # over the byte budget: waits
        assert blocked.cancelled_caught
        await budget.acquire(other, 600)  # another peer is not held back
        budget.release(peer, 600)
        await budget.acquire(peer, 5000)  # alone in flight, even a big one passes
        assert budget.in_flight(peer) == (1, 5000)

    trio.run(main)
