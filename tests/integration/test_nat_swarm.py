"""Swarm members behind real NATs exchanging rollout groups: network-only nodes
(`lab.network_node`: signed groups, the pull exchange, every pulled group verified)
in the namespaces of `netns.py`. A relay node on the internet; one node in each home, which
bootstraps from the relay and names it as its relay. They find each other through the
relay's view, pull each other's groups through the relay, hole punching moves them onto a
direct connection, and each trains on (chooses) groups of the other. Skipped, with the
reason, without root or the tools."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.netns import INET_IP, Topology, nat_topology, unavailable

REPO = Path(__file__).resolve().parents[2]
WHY_NOT = unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no NAT test: {WHY_NOT}")
ROUNDS = 8


def start(topo: Topology, namespace: str, args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [*topo.exec_prefix(namespace), sys.executable, "-m", "lab.network_node", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen) -> tuple[list[dict], dict, str]:
    """Its rounds, its closing record, and its stderr (its warnings)."""
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    records = [json.loads(line) for line in out.splitlines()]
    rounds = [r for r in records if "round" in r]
    (end,) = [r for r in records if "hole_punches" in r]
    return rounds, end, err


@pytest.mark.slow  # about 30 s on 2 cores; its faster sibling in the default suite: test_nat.py
@pytest.mark.timeout(180)
def test_members_behind_nat_pull_each_others_groups_and_punch_a_direct_connection(
    tmp_path: Path,
) -> None:
    common = ["--exchange", "pull", "--no-peer-exchange", "--rounds", str(ROUNDS)]
    common += ["--period", "2", "--groups", "4", "--shared", "4", "--lists", "4", "--pulls", "6"]
    procs: list[subprocess.Popen] = []
    with nat_topology() as topo:
        try:
            start_at = time.time() + 12.0
            relay = start(
                topo,
                topo.inet,
                [
                    *common,
                    "--listen",
                    f"/ip4/{INET_IP}/tcp/4001",
                    "--relay-service",
                    "--start-at",
                    str(start_at),
                ],
            )
            procs.append(relay)
            relay_addr = json.loads(relay.stdout.readline())["addrs"][0]
            homes = [
                start(
                    topo,
                    topo.homes[i],
                    [
                        *common,
                        "--listen",
                        "/ip4/0.0.0.0/tcp/4001",
                        "--bootstrap",
                        relay_addr,
                        "--relay",
                        relay_addr,
                        "--start-at",
                        str(start_at),
                    ],
                )
                for i in (1, 2)
            ]
            procs += homes
            ids = [json.loads(home.stdout.readline())["peer_id"] for home in homes]
            results = [finish(home) for home in homes]
            finish(relay)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=10)
    punches: dict[str, int] = {}
    for (rounds, end, err), other in zip(results, reversed(ids), strict=True):
        print(
            f"\nnode behind NAT: {sum(r['extra']['pulls'] for r in rounds)} groups pulled and "
            f"verified, {sum(s == other for r in rounds for s, _ in r['chosen'])} of the other's "
            f"chosen; hole punches {end['hole_punches']}"
        )
        assert len(rounds) == ROUNDS
        chosen = [sender for r in rounds for sender, _ in r["chosen"]]
        assert other in chosen, (other, chosen, err[-2000:])  # trained on the other's groups
        pulls = sum(r["extra"]["pulls"] for r in rounds)
        assert sum(r["accepted"] for r in rounds) == sum(r["verified"] for r in rounds) == pulls
        assert all(r["rejected"] == 0 for r in rounds)
        assert end["connections"][other] == ["direct"], end  # the relayed one is gone
        for outcome, n in end["hole_punches"].items():
            punches[outcome] = punches.get(outcome, 0) + n
        assert "hole punch with" not in err and "no hole punch" not in err, err[-2000:]
    # One punch: when both reached each other through the relay at once, the other node
    # yielded to it, or found the direct connection already there.
    assert punches.pop("direct") == 1 and set(punches) <= {"yielded", "already_direct"}, punches
