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
    """A `nat_node.py` process in one namespace (started; `wait_ready` before asking)."""

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
        self.nodes: dict = {}

    def wait_ready(self) -> None:
        ready = json.loads(self._proc.stdout.readline() or "{}")
        if ready.get("event") != "ready":
            raise AssertionError(f"node process did not start; log:\n{self.tail()}")
        self.nodes = ready["nodes"]

    def send(self, cmd: str, node: str, **args: object) -> dict:
        """Send a command; its answer is read by `receive` (commands are answered in order)."""
        request = {"id": next(self._ids), "cmd": cmd, "node": node, **args}
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        return request

    def receive(self, request: dict) -> dict:
        reply = json.loads(self._proc.stdout.readline() or "{}")
        if "error" in reply or reply.get("id") != request["id"]:
            raise AssertionError(f"{request}: {reply}; log:\n{self.tail()}")
        return reply

    def ask(self, cmd: str, node: str, **args: object) -> dict:
        return self.receive(self.send(cmd, node, **args))

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
def topology(request: pytest.FixtureRequest) -> Iterator[Topology]:
    """The namespaces, with routers that drop what nobody asked for (a stateful firewall) or,
    given "RST", answer it with a reset (their own TCP stack does, with no firewall)."""
    with nat_topology(getattr(request, "param", "DROP")) as topo:
        yield topo


def common(**kwargs: object) -> dict:
    return {"peer_exchange": False, "dial_timeout": 3.0, "autonat_interval": 0, **kwargs}


PSK = "ab" * 32


def bare(addrs: list[str]) -> list[str]:
    """Addresses as the pull exchange's view hands them on (no /p2p/<own id>)."""
    return [a.rsplit("/p2p/", 1)[0] for a in addrs]


def ms(seconds: list[float]) -> str:
    return f"{1000 * statistics.median(seconds):.0f} ms"


class Swarm:
    """A relay and three public peers on the internet; at each home a node with hole
    punching off ("slow") and one with it on ("punch"), each serving a 1 MiB blob, and
    each pair knowing the other's circuit address. `a` and `b` are the homes' processes."""

    def __init__(
        self, topology: Topology, tmp_path: Path, processes: list[Process], psk: str | None
    ) -> None:
        def node(**kwargs: object) -> dict:
            return common(psk=psk, **kwargs)

        nodes = {"relay": node(listen_addr=f"/ip4/{INET_IP}/tcp/4001", relay_service=True)}
        for i in (1, 2, 3):
            nodes[f"p{i}"] = node(listen_addr=f"/ip4/{INET_IP}/tcp/{4001 + i}")
        public = Process(topology, topology.inet, nodes, tmp_path / "inet.log")
        processes.append(public)
        public.wait_ready()
        relay = public.nodes["relay"]["addrs"]
        servers = [a for i in (1, 2, 3) for a in public.nodes[f"p{i}"]["addrs"]]
        spec = {
            "slow": node(listen_addr="/ip4/0.0.0.0/tcp/4001", relays=relay, hole_punch=False),
            "punch": node(listen_addr="/ip4/0.0.0.0/tcp/4002", relays=relay, bootstrap=servers),
        }
        for i in (1, 2):
            processes.append(Process(topology, topology.homes[i], spec, tmp_path / f"home{i}.log"))
        self.a, self.b = processes[1], processes[2]
        for home in (self.a, self.b):  # started together, waited for in turn
            home.wait_ready()

    def id(self, home: Process, name: str) -> str:
        return home.nodes[name]["peer_id"]

    def check_private(self) -> None:
        """AutoNAT: the public peers cannot dial either punching node back, so each finds it
        is private and hands out only its circuit address."""
        for home in (self.a, self.b):
            assert wait_until(lambda h=home: len(h.ask("peers", "punch")["peers"]) >= 4, 15)
        asked = [(home, home.send("reachability", "punch")) for home in (self.a, self.b)]
        for home, request in asked:  # both checks at once: each waits out dial timeouts
            assert home.receive(request)["verdict"] == "private"
            addrs = home.ask("addrs", "punch")["addrs"]
            assert addrs and all("/p2p-circuit/" in x for x in addrs), addrs

    def introduce(self) -> dict:
        sums = {}
        for home, key in ((self.a, "from-a"), (self.b, "from-b")):
            for name in ("slow", "punch"):
                sums[(name, key)] = home.ask("serve", name, key=key, size=BLOB_SIZE)["sha256"]
        for name in ("slow", "punch"):
            for one, other in ((self.a, self.b), (self.b, self.a)):
                addrs = bare(other.ask("addrs", name)["addrs"])
                one.ask("learn", name, peer=self.id(other, name), addrs=addrs)
        return sums

    def pull(self, puller: Process, name: str, key: str, count: int = 1) -> dict:
        other = self.b if puller is self.a else self.a
        return puller.ask("fetch", name, peer=self.id(other, name), key=key, count=count)

    def kinds(self, name: str) -> list[str]:
        return self.a.ask("connections", name, peer=self.id(self.b, name))["kinds"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("psk", [None, PSK], ids=["open", "private"])
def test_two_nodes_behind_nat_meet_through_a_relay_then_punch_a_direct_connection(
    topology: Topology, tmp_path: Path, psk: str | None
) -> None:
    processes: list[Process] = []
    try:
        swarm = Swarm(topology, tmp_path, processes, psk)
        a, b = swarm.a, swarm.b
        swarm.check_private()
        sums = swarm.introduce()

        # Relay only: both ways through the relay, and it stays relayed.
        first = swarm.pull(a, "slow", "from-b")
        assert first["sha256"] == sums[("slow", "from-b")]
        relayed = swarm.pull(a, "slow", "from-b", FETCHES)
        back = swarm.pull(b, "slow", "from-a", FETCHES)
        assert back["sha256"] == sums[("slow", "from-a")]
        assert swarm.kinds("slow") == ["relayed"]

        # Hole punching: the first pull goes through the relay, the rest directly.
        began = time.monotonic()
        punch_first = swarm.pull(a, "punch", "from-b")
        assert punch_first["sha256"] == sums[("punch", "from-b")]
        assert wait_until(lambda: swarm.kinds("punch") == ["direct"], 30), (
            swarm.kinds("punch"),
            b.tail(),
        )
        punched = time.monotonic() - began
        assert b.ask("stats", "punch")["stats"]["hole_punches"] == {"direct": 1}
        direct = swarm.pull(a, "punch", "from-b", FETCHES)
        direct_back = swarm.pull(b, "punch", "from-a", FETCHES)
        assert direct_back["sha256"] == sums[("punch", "from-a")]
        assert swarm.kinds("punch") == ["direct"]
        print(
            f"\n{'private' if psk else 'open'} network, {BLOB_SIZE} B blob between two nodes"
            f" behind NAT, median of {FETCHES}:"
            f"\n  through the relay: A<-B {ms(relayed['seconds'])}, B<-A {ms(back['seconds'])}"
            f" (first, with the circuit's dial, {ms(first['seconds'])})"
            f"\n  hole punched: direct {punched:.1f} s after the first pull began"
            f" ({ms(punch_first['seconds'])}); then A<-B {ms(direct['seconds'])},"
            f" B<-A {ms(direct_back['seconds'])}"
        )
    finally:
        for process in processes:
            process.close()


@pytest.mark.parametrize("topology", ["RST"], indirect=True, ids=["resetting-routers"])
@pytest.mark.timeout(120)
def test_routers_that_reset_unasked_connections_leave_the_pair_on_the_relay_saying_so(
    topology: Topology, tmp_path: Path
) -> None:
    """TCP hole punching needs the two SYNs to cross between the routers: a router that
    resets the first one to arrive (no firewall) ends the punch unless they cross within the
    one-way latency between the routers, microseconds on these veth pairs. Every attempt
    fails; the pair keeps pulling through the relay, and the node says why, at WARNING."""
    processes: list[Process] = []
    try:
        swarm = Swarm(topology, tmp_path, processes, None)
        a, b = swarm.a, swarm.b
        swarm.check_private()
        sums = swarm.introduce()
        assert swarm.pull(a, "punch", "from-b")["sha256"] == sums[("punch", "from-b")]
        assert wait_until(lambda: b.ask("stats", "punch")["stats"]["hole_punches"], 60)
        assert b.ask("stats", "punch")["stats"]["hole_punches"] == {"failed": 1}
        assert swarm.kinds("punch") == ["relayed"]
        assert swarm.pull(b, "punch", "from-a")["sha256"] == sums[("punch", "from-a")]
        assert swarm.pull(a, "punch", "from-b")["sha256"] == sums[("punch", "from-b")]
        warning = [x for x in b.log.read_text().splitlines() if "hole punch with" in x]
        assert len(warning) == 1 and " WARNING " in warning[0], warning
        assert "failed 3 times" in warning[0] and "stays on the relay" in warning[0]
    finally:
        for process in processes:
            process.close()
