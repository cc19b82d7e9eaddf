"""Two nodes, each behind a real NAT (network namespaces, veth pairs, iptables MASQUERADE;
`netns.py`), and a relay on the "internet" between them.

AutoNAT finds each of them private (three public peers fail to dial it back), so each
hands out only its circuit address. A pair with hole punching off pulls both ways through
the relay; a pair with it on pulls through the relay once, then DCUtR moves it onto a
direct connection and it pulls both ways directly. Times per 1 MiB fetch are printed
(`pytest -s`). Skipped, with the reason, without root, `ip` or `iptables`.
"""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.netns import INET_IP, Topology, nat_topology, unavailable
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
BLOB_SIZE = 1024 * 1024
FETCHES = 5
WHY_NOT = unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no NAT test: {WHY_NOT}")


class Process:
    """A `nat_node.py` process in one namespace."""

    def __init__(self, topo: Topology, namespace: str, spec: dict, log: Path) -> None:
        self.log = log
        self._ids = itertools.count()
        self._proc = subprocess.Popen(
            [
                *topo.exec_prefix(namespace),
                sys.executable,
                "-m",
                "tests.integration.nat_node",
                json.dumps(spec),
                str(log),
            ],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = json.loads(self._proc.stdout.readline() or "{}")
        if ready.get("event") != "ready":
            raise AssertionError(f"node process did not start; log:\n{self.tail()}")
        self.nodes = ready["nodes"]

    def ask(self, cmd: str, node: str, **args: object) -> dict:
        request = {"id": next(self._ids), "cmd": cmd, "node": node, **args}
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        reply = json.loads(self._proc.stdout.readline() or "{}")
        if "error" in reply or reply.get("id") != request["id"]:
            raise AssertionError(f"{cmd} on {node}: {reply}; log:\n{self.tail()}")
        return reply

    def tail(self) -> str:
        return "".join(self.log.read_text().splitlines(True)[-30:]) if self.log.exists() else ""

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write('{"cmd": "exit"}\n')
                self._proc.stdin.close()
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait(timeout=10)


@pytest.fixture
def topology() -> Iterator[Topology]:
    with nat_topology() as topo:
        yield topo


def common(**kwargs: object) -> dict:
    return {"peer_exchange": False, "dial_timeout": 3.0, "autonat_interval": 0, **kwargs}


def bare(addrs: list[str]) -> list[str]:
    """Addresses as the pull exchange's view hands them on (no /p2p/<own id>)."""
    return [a.rsplit("/p2p/", 1)[0] for a in addrs]


@pytest.mark.timeout(120)
def test_two_nodes_behind_nat_meet_through_a_relay_then_punch_a_direct_connection(
    topology: Topology, tmp_path: Path
) -> None:
    processes: list[Process] = []
    try:
        public = Process(
            topology,
            topology.inet,
            {
                "relay": common(listen_addr=f"/ip4/{INET_IP}/tcp/4001", relay_service=True),
                **{
                    f"p{i}": common(listen_addr=f"/ip4/{INET_IP}/tcp/{4001 + i}") for i in (1, 2, 3)
                },
            },
            tmp_path / "inet.log",
        )
        processes.append(public)
        relay = public.nodes["relay"]["addrs"]
        servers = [a for i in (1, 2, 3) for a in public.nodes[f"p{i}"]["addrs"]]
        homes = {}
        for i in (1, 2):
            spec = {
                # relay only: hole punching off
                "slow": common(listen_addr="/ip4/0.0.0.0/tcp/4001", relays=relay, hole_punch=False),
                "punch": common(
                    listen_addr="/ip4/0.0.0.0/tcp/4002", relays=relay, bootstrap=servers
                ),
            }
            homes[i] = Process(topology, topology.homes[i], spec, tmp_path / f"home{i}.log")
            processes.append(homes[i])
        a, b = homes[1], homes[2]

        # AutoNAT: peers cannot dial either node back, so each hands out only its circuit.
        for home in (a, b):
            assert wait_until(lambda home=home: len(home.ask("peers", "punch")["peers"]) >= 4, 15)
            assert home.ask("reachability", "punch")["verdict"] == "private"
            addrs = home.ask("addrs", "punch")["addrs"]
            assert addrs and all("/p2p-circuit/" in x for x in addrs), addrs

        def ids(home: Process, name: str) -> str:
            return home.nodes[name]["peer_id"]

        sums = {}
        for home, key in ((a, "from-a"), (b, "from-b")):
            for name in ("slow", "punch"):
                sums[(name, key)] = home.ask("serve", name, key=key, size=BLOB_SIZE)["sha256"]
        for name in ("slow", "punch"):
            a.ask("learn", name, peer=ids(b, name), addrs=bare(b.ask("addrs", name)["addrs"]))
            b.ask("learn", name, peer=ids(a, name), addrs=bare(a.ask("addrs", name)["addrs"]))

        # Relay only: both ways through the relay, and it stays relayed.
        first = a.ask("fetch", "slow", peer=ids(b, "slow"), key="from-b")
        assert first["sha256"] == sums[("slow", "from-b")]
        relayed = a.ask("fetch", "slow", peer=ids(b, "slow"), key="from-b", count=FETCHES)
        back = b.ask("fetch", "slow", peer=ids(a, "slow"), key="from-a", count=FETCHES)
        assert back["sha256"] == sums[("slow", "from-a")]
        assert set(a.ask("connections", "slow", peer=ids(b, "slow"))["kinds"]) == {"relayed"}

        # Hole punching: the first pull goes through the relay, the rest directly.
        began = time.monotonic()
        punch_first = a.ask("fetch", "punch", peer=ids(b, "punch"), key="from-b")
        assert punch_first["sha256"] == sums[("punch", "from-b")]
        assert wait_until(
            lambda: a.ask("connections", "punch", peer=ids(b, "punch"))["kinds"] == ["direct"], 30
        ), (a.ask("connections", "punch", peer=ids(b, "punch")), b.tail())
        punched = time.monotonic() - began
        stats = b.ask("stats", "punch")["stats"]
        assert stats["hole_punches"] == {"direct": 1}, stats["hole_punches"]
        direct = a.ask("fetch", "punch", peer=ids(b, "punch"), key="from-b", count=FETCHES)
        direct_back = b.ask("fetch", "punch", peer=ids(a, "punch"), key="from-a", count=FETCHES)
        assert direct_back["sha256"] == sums[("punch", "from-a")]
        assert a.ask("connections", "punch", peer=ids(b, "punch"))["kinds"] == ["direct"]

        def ms(seconds: list[float]) -> str:
            return f"{1000 * statistics.median(seconds):.0f} ms"

        print(
            f"\n{BLOB_SIZE} B blob between two nodes behind NAT, median of {FETCHES}:"
            f"\n  through the relay: A<-B {ms(relayed['seconds'])}, B<-A {ms(back['seconds'])}"
            f" (first, with the circuit's dial, {ms(first['seconds'])})"
            f"\n  hole punched: direct {punched:.1f} s after the first pull began"
            f" ({ms(punch_first['seconds'])}); then A<-B {ms(direct['seconds'])},"
            f" B<-A {ms(direct_back['seconds'])}"
        )
    finally:
        for process in processes:
            process.close()
