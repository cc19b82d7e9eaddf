"""A sender that leaves between its list and the pull costs the round no fetch timeout,
and a peer that left since its last list costs no list timeout.

A network-only pull node in this process, over libp2p on 127.0.0.1, and a sender in its
own process (`lab.network_node`: 4 groups every 0.5 s, pulling none). Once the
node has pulled from the sender a few rounds (its answers measured), the sender process is
stopped (SIGSTOP: its connections stay open and nothing answers, as when a machine sleeps
or loses its network), inside the node's round, after the node took the sender's list and
chose its groups and before it fetches them. Before, that round waited the group fetch's
whole timeout (5 s); now it waits the sender's patience (from its measured answers, at
least 0.25 s) and ends. The fetches run on: once they have timed out, the next round takes
them and judges them as before (the sender took the fetch and sent nothing: refused hard,
`fetch_too_slow`; the pull counted failed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.network_node import NetworkNode
from lab.network_settings import ExchangeKind, NetworkNodeSettings
from swarm.core.reasons import Reason
from swarm.exchange.pull import REFETCH_TIMEOUT_S, PullExchange, PullSettings

ROOT = Path(__file__).resolve().parents[2]
FETCH_TIMEOUT_S = 5.0


class Sender:
    """A network-only node process that announces and serves groups and pulls none."""

    def __init__(self) -> None:
        args = ["--exchange", "pull", "--rounds", "1000", "--period", "0.5", "--groups", "4"]
        args += ["--shared", "0", "--pulls", "0", "--linger", "0"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lab.network_node", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert self.proc.stdout is not None
        hello = json.loads(self.proc.stdout.readline())
        self.peer_id: str = hello["peer_id"]
        self.addrs: list[str] = hello["addrs"]
        self.stopped = False

    def leave(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)
        self.stopped = True

    def end(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def pair():
    """The sender and a node that has pulled from it a few rounds (its answers measured);
    both ended after the test."""
    sender = Sender()
    settings = NetworkNodeSettings(
        exchange=ExchangeKind.PULL,
        groups_per_round=4,
        shared_groups=4,
        pull=PullSettings(pull_lists=4, pull_groups=4, fetch_timeout_s=FETCH_TIMEOUT_S),
    )
    node = NetworkNode.over_libp2p(
        settings, listen="/ip4/127.0.0.1/tcp/0", bootstrap=tuple(sender.addrs)
    )
    try:
        node.start()
        pulled = 0
        for _ in range(60):
            pulled += node.run_round().accepted
            if pulled >= 8:
                break
            time.sleep(0.3)
        assert pulled >= 8, "the node never pulled from the sender"
        yield sender, node
    finally:
        sender.end()
        node.close()


def test_a_sender_that_leaves_between_its_list_and_the_pull_costs_no_fetch_timeout(pair):
    sender, puller = pair
    exchange = puller.exchange
    assert isinstance(exchange, PullExchange)
    pull_all = exchange.puller.pull_all
    chosen_at_leave: list = []

    def leave_then_pull(chosen, deadline, round_):
        if any(a.sender == sender.peer_id for a in chosen) and not sender.stopped:
            chosen_at_leave.extend(chosen)
            sender.leave()  # its list is taken and its groups chosen: it leaves now
        return pull_all(chosen, deadline, round_)

    exchange.puller.pull_all = leave_then_pull  # type: ignore[method-assign]
    for _ in range(10):
        time.sleep(0.3)
        began = time.monotonic()
        cost = puller.run_round()
        waited = time.monotonic() - began
        if sender.stopped:
            break
    assert chosen_at_leave, "no group of the sender was chosen to pull"
    print(f"the round the sender left in took {waited:.2f} s: {cost.extra}")
    # before: the group fetch's whole timeout (5 s); now its patience (>= 0.25 s)
    assert waited < 2.0, cost.extra
    assert cost.extra["unwaited"] >= 1 and cost.extra["pulls"] >= 1
    before = puller.verifier.reputation.record(sender.peer_id).rejected.copy()
    time.sleep(FETCH_TIMEOUT_S + 0.5)  # the fetches that ran on time out meanwhile
    extra = puller.run_round().extra
    print("the next round:", extra)
    record = puller.verifier.reputation.record(sender.peer_id)
    # judged as before, a round later: the sender took each fetch and sent nothing
    # (refused hard), and each of those pulls failed
    ours = len([a for a in chosen_at_leave if a.sender == sender.peer_id])
    stalls = record.rejected[Reason.FETCH_TOO_SLOW] - before[Reason.FETCH_TOO_SLOW]
    assert stalls == extra["stalled"] == ours >= 1
    assert extra["late"] >= ours and extra["pulls_failed"] >= ours


def test_a_peer_that_left_since_its_list_costs_no_list_timeout(pair):
    """Its list, asked at the end of the last round, came; it left before this round asked
    it again (the list being older than `fresh_list_s`). Before, the round waited the
    re-ask's whole timeout (1 s); now the peer's patience, and the re-ask, running on, is
    taken when it ends, as a list asked off the round (failed, counted)."""
    sender, puller = pair
    puller.run_round()  # asks the sender's list off the round
    time.sleep(0.6)  # it came, and is old by now
    sender.leave()
    began = time.monotonic()
    cost = puller.run_round()
    waited = time.monotonic() - began
    print(f"the round after the sender left took {waited:.2f} s: {cost.extra}")
    assert cost.extra["lists_refreshed"] == 1
    assert waited < 0.9 * REFETCH_TIMEOUT_S, cost.extra  # before: the re-ask's 1 s
    assert cost.extra["unwaited"] == 1
    time.sleep(REFETCH_TIMEOUT_S + 0.3)  # the re-ask that ran on times out meanwhile
    extra = puller.run_round().extra
    print("the next round:", extra)
    assert extra["lists_failed"] >= 1  # counted as before, a round later
