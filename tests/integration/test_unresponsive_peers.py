"""A round never waits on a peer that is gone or slow: real processes on 127.0.0.1.

A network-only pull node (`lab.network_node`, its rounds back to back) and an honest
peer run as processes; `lab.unresponsive_peer` brings peers that vanish
with their TCP connections open (1, 4 and 16), a view of 64 unreachable addresses that drop
SYNs, a view request never answered, and announcements whose fetches stall. Before the node
suspended peers that failed to answer (and probed peers it had only heard of off the round),
every such case cost every round a fetch timeout (3.75-5 s) for as long as the peer stayed:
the goal is that from the third round after the event on every round is within 1.2x of the
baseline and the median within 1.1x, for a node whose rounds take 0.3 s (the node's rounds
are paced to that; its own work is 0.01-0.07 s). Each test prints its worst round against
that goal and fails on a median off it or on any round that waited on a peer (1 s over the
baseline; scheduling on shared cores alone has made rounds 0.26 s late). The same goal for a `swarm-node join` node, whose
rounds are all model work, is measured by `scripts/bench_unresponsive.py`.
"""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import replace

import pytest

from lab.processes import spawn

PERIOD = 0.3  # the node's rounds are paced to this
GOAL_ROUND, GOAL_MEDIAN = 1.2, 1.1  # a round, and the median, against the baseline
WAITED_S = 1.0  # a round this much over the baseline waited on a peer (a fetch timeout: 3.75-5 s)


class Member:
    """A network-only pull node process; its round records as they come (arrival time)."""

    def __init__(self, rounds: int, bootstrap: str | None = None):
        args = ["--exchange", "pull", "--rounds", str(rounds), "--period", str(PERIOD)]
        args += ["--groups", "8", "--shared", "4", "--linger", "0"]
        args += ["--bootstrap", bootstrap] if bootstrap else []
        self.proc = spawn("lab.network_node", args)
        assert self.proc.stdout is not None
        hello = json.loads(self.proc.stdout.readline())
        self.addr: str = hello["addrs"][0]
        self.rounds: list[tuple[float, dict]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.rounds.append((time.time(), json.loads(line)))

    def wait_rounds(self, n: int, timeout: float = 90.0) -> None:
        target = len(self.rounds) + n
        deadline = time.time() + timeout
        while len(self.rounds) < target and time.time() < deadline:
            time.sleep(0.05)
        assert len(self.rounds) >= target, f"{len(self.rounds)} rounds, wanted {target}"

    def finish(self, timeout: float = 120.0) -> None:
        self.proc.wait(timeout=timeout)
        self.reader.join(timeout=5)
        assert self.proc.returncode == 0


class Attack:
    """`lab.unresponsive_peer` in one mode, against `node`."""

    def __init__(self, mode: str, node: str, *extra: str):
        self.proc = spawn("lab.unresponsive_peer", ["--mode", mode, "--bootstrap", node, *extra])
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "the attacking process did not start"
        self.peers = json.loads(line)["peers"]

    def say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def end(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run(mode: str, *extra: str, act=None, before: int = 8, after: int = 16, solo: bool = False):
    """The node's round times before and after the event (the attack ready, then `act`);
    `solo`: the node has no other peer (as a node just started, or the only one left)."""
    honest = None if solo else Member(rounds=before + after + 340)
    node = Member(rounds=before + after + 300, bootstrap=honest.addr if honest else None)
    attack = None
    try:
        node.wait_rounds(before)
        attack = Attack(mode, node.addr, *extra)
        if act is not None:
            node.wait_rounds(1)
            act(attack)
        event = time.time()
        node.wait_rounds(after, timeout=after * 8.0 + 60)
    finally:
        print("rounds:", [(round(t % 1000, 1), round(r["wall_s"], 2)) for t, r in node.rounds])
        if attack is not None:
            attack.end()
        for member in (node, honest):
            if member is None:
                continue
            if member.proc.poll() is None:
                member.proc.terminate()
            member.proc.wait(timeout=60)
    base = [r["wall_s"] for t, r in node.rounds[2:before]]
    later = [r for t, r in node.rounds if t > event]
    return statistics.median(base), later


def check(base: float, later: list[dict], settle: int = 2) -> None:
    walls = [r["wall_s"] for r in later]
    print(f"baseline {base:.3f} s; after: {[round(w, 2) for w in walls]}")
    print(
        [
            {
                k: r["extra"].get(k)
                for k in (
                    "lists_asked",
                    "lists_failed",
                    "suspended",
                    "probes",
                    "probes_failed",
                    "stalled",
                    "pulls",
                    "pulls_failed",
                    "view_size",
                )
            }
            for r in later
        ]
    )
    # The goal for a node whose rounds take `PERIOD` (the node is paced to it: a round
    # lasts its period, or its work if that is longer): from `settle` rounds after the
    # event on, every round within 1.2x of the baseline, and the median within 1.1x. Before,
    # every round after the event waited on a fetch timeout (3.75-5 s each). The goal is
    # printed; a timed test on shared cores cannot hold every round to 0.06 s (a test run
    # beside others saw rounds of 0.37 and 0.56 s), so what fails here is a round that
    # waited on a peer: one more than `WAITED_S` over the baseline, or a median off the goal.
    paced = [max(PERIOD, w) for w in walls]
    base_paced = max(PERIOD, base)
    worst = max(paced[settle:])
    print(f"worst round {worst / base_paced:.2f}x the baseline (goal {GOAL_ROUND}x)")
    assert worst <= base_paced + WAITED_S, (base, walls)
    assert statistics.median(paced) <= GOAL_MEDIAN * base_paced, (base, walls)


SLOW = pytest.mark.slow  # 10-28 s each on 2 cores; the 4-peer case stays in the default suite


@pytest.mark.parametrize("count", [pytest.param(1, marks=SLOW), 4, pytest.param(16, marks=SLOW)])
def test_peers_that_vanish_with_their_connections_open_cost_no_round(count):
    """From the second round after they vanish, no round waits on them. The default suite
    runs the 4-peer case (several peers gone at once, about 10 s); `pytest -m slow` runs the
    1-peer case and the 16-peer one (28 s, most of it starting the 16 peers)."""
    stop = lambda a: a.proc.send_signal(signal.SIGSTOP)  # noqa: E731
    base, later = run("vanish", "--count", str(count), act=stop, solo=True)
    check(base, later)
    assert max(r["extra"]["suspended"] for r in later) >= 1


def test_a_view_of_unreachable_addresses_is_never_dialled_in_a_round():
    base, later = run("dead-view", act=lambda a: None, after=12)
    check(base, later)
    probes = sum(r["extra"]["probes"] for r in later)
    assert probes >= 16  # the made-up peers were tried, off the round


def test_a_peer_that_never_answers_a_view_request_costs_no_round():
    base, later = run("silent-view")
    check(base, later)


def test_a_sender_whose_group_fetches_stall_is_refused_hard_and_not_waited_on_again():
    """No round waits on the stalls (before: its first one, 5 s, once; before that, every
    round); the fetches run on, and once they time out (5 s) the sender is refused hard for
    them, as before: 24 rounds of 0.3 s see that happen."""
    base, later = run("stall-groups", "--groups", "64", after=24)
    walls = [r["wall_s"] for r in later]
    assert max(walls) < 1.0, walls
    check(base, later)
    assert sum(r["extra"]["unwaited"] for r in later) >= 1
    assert sum(r["extra"]["stalled"] for r in later) >= 1
    assert sum(r["rejected"] for r in later) >= 1


def test_closing_a_transport_closes_its_connections():
    """`Libp2pTransport.close()` closes its connections: its peers see it gone at once
    (before, its sockets stayed open and they kept waiting on it)."""
    from swarm.p2p.libp2p import Libp2pTransport, TransportSettings

    loopback = TransportSettings(listen_addr="/ip4/127.0.0.1/tcp/0")
    listener = Libp2pTransport(loopback)
    listener.start()
    dialler = Libp2pTransport(replace(loopback, bootstrap=tuple(listener.listen_addrs())))
    try:
        dialler.start()
        deadline = time.time() + 20
        while not listener.peers() and time.time() < deadline:
            time.sleep(0.05)
        assert [p.peer_id for p in listener.peers()] == [dialler.peer_id]
        dialler.close()
        deadline = time.time() + 5
        while listener.peers() and time.time() < deadline:
            time.sleep(0.05)
        assert listener.peers() == []  # (before: still connected 10 s later)
    finally:
        dialler.close()
        listener.close()
