"""`swarm-node doctor --network` on a node behind a real NAT (network namespaces, `netns.py`):
three public peers and a relay on the "internet", the node in a home behind a router that
drops what nobody asked for.

The doctor reaches the three peers, says they see the node at its router's address (not
its own), that AutoNAT finds it private (none of them can dial it back), that the relay
holds a reservation for it and a relay that is down holds none, and that the other home's
router drops a connection request (timed out). Skipped, with the reason, without root,
`ip` or `iptables`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.netns import INET_IP, WAN_IPS, Topology, nat_topology, unavailable
from tests.integration.test_nat import Process, common

REPO = Path(__file__).resolve().parents[2]
NOBODY = "12D3KooWLp6Fy6k9RjqjvRL2FaZg1x1A1uvBmUuUxsyDAzDzE7oa"
WHY_NOT = unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=f"no NAT test: {WHY_NOT}")


@pytest.fixture
def topology() -> Iterator[Topology]:
    with nat_topology("DROP") as topo:
        yield topo


def _config(folder: Path, bootstrap: list[str], relays: list[str]) -> Path:
    folder.mkdir()
    path = folder / "config.toml"
    path.write_text(
        '[node]\nrun_dir = "."\n[p2p]\nlisten = "/ip4/0.0.0.0/tcp/4001"\n'
        f"bootstrap = {json.dumps(bootstrap)}\nrelays = {json.dumps(relays)}\n"
    )
    return path


@pytest.mark.timeout(120)
def test_behind_nat_the_doctor_says_private_seen_at_the_router_and_the_relay_holds(
    topology: Topology, tmp_path: Path
) -> None:
    nodes = {"relay": common(listen_addr=f"/ip4/{INET_IP}/tcp/4001", relay_service=True)}
    for i in (1, 2, 3):
        nodes[f"p{i}"] = common(listen_addr=f"/ip4/{INET_IP}/tcp/{4001 + i}")
    public = Process(topology, topology.inet, nodes, tmp_path / "inet.log")
    try:
        public.wait_ready()
        servers = [public.nodes[f"p{i}"]["addrs"][0] for i in (1, 2, 3)]
        relay = public.nodes["relay"]["addrs"][0]
        down = f"/ip4/{INET_IP}/tcp/4999/p2p/{NOBODY}"  # a relay that is not up
        # the other home's router: a connection request from outside is dropped
        dropped = f"/ip4/{WAN_IPS[2]}/tcp/4001/p2p/{public.nodes['p2']['peer_id']}"
        config = _config(tmp_path / "home", [*servers, dropped], [relay, down])
        done = subprocess.run(
            [*topology.exec_prefix(topology.homes[1]), sys.executable, "-m", "swarm.cli"]
            + ["doctor", "--network", "--timeout", "3", "--config", str(config)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=90,
        )
    finally:
        public.close()
    out = done.stdout + done.stderr
    print(out)  # pytest -s shows the report
    assert done.returncode == 0, out
    for addr in servers:
        assert f"ok       bootstrap {addr}: reached: " in out, out
    assert f"warning  bootstrap {dropped}: timed out: no answer to the TCP connection" in out
    assert "network: can take part: 3 of 4 bootstrap peers reached" in out
    assert f"peers see this node's connections come from {WAN_IPS[1]} (by " in out
    assert "not from this machine's own 192.168.1.2: a router translates them (NAT)" in out
    assert (
        "warning  AutoNAT: private: 3 of 3 peers could not dial this node back at "
        "/ip4/0.0.0.0/tcp/4001: it pulls, but peers pull from it only through a relay" in out
    ), out
    assert (
        f"ok       relay {relay}: reservation held: peers reach this node at {relay}/p2p-circuit/p2p/"
        in out
    )
    assert (
        f"warning  relay {down}: no reservation: refused: nothing listens at {INET_IP}:4999" in out
    )
