"""Running a network-only node's rounds on the wall clock, as the benchmarks' processes do:
rounds paced to a period from a shared start, the wait for a first peer, and the readiness
barrier (a start time written to a file by whoever started every node).
"""

from __future__ import annotations

import time
from typing import Protocol

from lab.network_settings import ByteMeter, RoundCost
from swarm.p2p.transport import Transport


class PacedNode(Protocol):
    """What pacing needs of a node (`lab.network_node.NetworkNode` is one)."""

    transport: Transport
    byte_meter: ByteMeter

    def run_round(self) -> RoundCost: ...


def run_paced(
    node: PacedNode, rounds: int, period_s: float, start_at: float, on_round=None
) -> list[RoundCost]:
    """Run `rounds` rounds, round r starting at `start_at + r * period_s` (wall clock).

    A round's window lasts until the next one starts: its bytes and CPU are what the
    process moved and spent in that window, including what peers' traffic cost while it
    waited (the network thread works between rounds too).
    """
    costs = []
    _sleep_until(start_at)
    for r in range(rounds):
        received, sent = node.byte_meter()
        cpu = time.process_time()
        cost = node.run_round()
        _sleep_until(start_at + (r + 1) * period_s)
        now_received, now_sent = node.byte_meter()
        cost.bytes_in, cost.bytes_out = now_received - received, now_sent - sent
        cost.cpu_s = time.process_time() - cpu
        costs.append(cost)
        if on_round is not None:
            on_round(cost)
    return costs


def wait_connected(node: PacedNode, timeout: float, poll_s: float = 0.5) -> int:
    """Connected peers once there is one (or `timeout` s passed): a node is ready when it
    has joined, not when it has started."""
    deadline = time.monotonic() + timeout
    while True:
        peers = len(node.transport.peers())
        if peers or time.monotonic() >= deadline:
            return peers
        time.sleep(poll_s)


def wait_start(path: str, poll_s: float = 0.2) -> float:
    """The time of round 0 written to `path` by whoever started every node, once it exists
    (every node serves from its start, so all are reachable by then)."""
    import pathlib

    target = pathlib.Path(path)
    while True:
        try:
            return float(target.read_text())
        except (OSError, ValueError):
            time.sleep(poll_s)


def _sleep_until(when: float) -> None:
    delay = when - time.time()
    if delay > 0:
        time.sleep(delay)
