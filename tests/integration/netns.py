"""Two homes, each behind its own NAT router, and an "internet" between them, built from
Linux network namespaces for one test and removed after it, whatever happens.

    inet    bridge 10.77.0.1/24 (the relay and public peers listen here)
      |-- nat1   wan 10.77.0.2, lan 192.168.1.1   -- home1  192.168.1.2
      '-- nat2   wan 10.77.0.3, lan 192.168.2.1   -- home2  192.168.2.2

Each router masquerades its home's traffic (iptables MASQUERADE, which keeps the source
port when it can, as most home routers do) and drops what arrives from the internet
unasked (conntrack state NEW): a home can dial out, nobody can dial in. All addresses
live inside the namespaces; the machine's own network is not touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

INET_IP = "10.77.0.1"
WAN_IPS = {1: "10.77.0.2", 2: "10.77.0.3"}
HOME_IPS = {1: "192.168.1.2", 2: "192.168.2.2"}
# what installs the tools (scripts/setup.sh installs no system package unless asked)
SYSTEM_SETUP = "SWARM_SETUP_SYSTEM=1 scripts/setup.sh"


@dataclass(frozen=True)
class Topology:
    inet: str  # namespace names
    nats: dict[int, str]
    homes: dict[int, str]

    def exec_prefix(self, namespace: str) -> list[str]:
        return ["ip", "netns", "exec", namespace]


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=20)


def unavailable() -> str | None:
    """Why the topology cannot be built here (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [t for t in ("ip", "iptables") if shutil.which(t) is None]
    if missing:
        return f"{' and '.join(missing)} not installed ({SYSTEM_SETUP} installs iproute2 and iptables, as root with apt-get)"
    probe = f"swprobe{os.getpid()}"
    ipt = ["ip", "netns", "exec", probe, "iptables"]
    try:  # every kind of thing the topology makes, once, in a namespace of its own
        _run("ip", "netns", "add", probe)
        _run("ip", "-n", probe, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", probe, "link", "add", "pa", "type", "veth", "peer", "name", "pb")
        _run(*ipt, "-t", "nat", "-A", "POSTROUTING", "-o", "pa", "-j", "MASQUERADE")
        _run(*ipt, "-A", "FORWARD", "-m", "conntrack", "--ctstate", "NEW", "-j", "DROP")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return f"network namespaces or iptables do not work here: {detail.strip()[:200]}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=20)
    return None


def _remove_stale() -> None:
    """Namespaces an earlier run left behind (it was killed before cleaning up)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=20)
    for line in listed.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = re.fullmatch(r"sw(\d+)(inet|nat\d|home\d)", name)
        if match and not Path(f"/proc/{match.group(1)}").exists():
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)


@contextlib.contextmanager
def nat_topology(unsolicited: str = "DROP") -> Iterator[Topology]:
    """`unsolicited`: what each router does with a connection from outside nobody asked for:
    "DROP" (a stateful firewall, as most home routers have) or "RST" (no firewall: the
    router's own TCP stack answers with a reset)."""
    _remove_stale()
    tag = f"sw{os.getpid()}"
    topo = Topology(
        inet=f"{tag}inet",
        nats={i: f"{tag}nat{i}" for i in (1, 2)},
        homes={i: f"{tag}home{i}" for i in (1, 2)},
    )
    made: list[str] = []
    try:
        for ns in (topo.inet, *topo.nats.values(), *topo.homes.values()):
            _run("ip", "netns", "add", ns)
            made.append(ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        inet = topo.inet
        _run("ip", "-n", inet, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", inet, "addr", "add", f"{INET_IP}/24", "dev", "br0")
        _run("ip", "-n", inet, "link", "set", "br0", "up")
        for i in (1, 2):
            _build_home(topo, i, unsolicited)
        yield topo
    finally:
        for ns in reversed(made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


def _build_home(topo: Topology, i: int, unsolicited: str) -> None:
    inet, nat, home = topo.inet, topo.nats[i], topo.homes[i]
    # the router's wan side on the internet's bridge
    _run(
        "ip",
        "-n",
        nat,
        "link",
        "add",
        "wan",
        "type",
        "veth",
        "peer",
        "name",
        f"b{i}",
        "netns",
        inet,
    )
    _run("ip", "-n", inet, "link", "set", f"b{i}", "master", "br0", "up")
    _run("ip", "-n", nat, "addr", "add", f"{WAN_IPS[i]}/24", "dev", "wan")
    _run("ip", "-n", nat, "link", "set", "wan", "up")
    # the home behind it
    _run(
        "ip", "-n", nat, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", home
    )
    _run("ip", "-n", nat, "addr", "add", f"192.168.{i}.1/24", "dev", "lan")
    _run("ip", "-n", nat, "link", "set", "lan", "up")
    _run("ip", "-n", home, "addr", "add", f"{HOME_IPS[i]}/24", "dev", "eth0")
    _run("ip", "-n", home, "link", "set", "eth0", "up")
    _run("ip", "-n", home, "route", "add", "default", "via", f"192.168.{i}.1")
    # routing, masquerading, and (DROP) no unasked traffic in
    ipt = ["ip", "netns", "exec", nat, "iptables"]
    _run("ip", "netns", "exec", nat, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    _run(*ipt, "-t", "nat", "-A", "POSTROUTING", "-o", "wan", "-j", "MASQUERADE")
    if unsolicited == "DROP":
        for chain in ("INPUT", "FORWARD"):
            _run(
                *ipt,
                "-A",
                chain,
                "-i",
                "wan",
                "-m",
                "conntrack",
                "--ctstate",
                "NEW,INVALID",
                "-j",
                "DROP",
            )
