"""`swarm-node join` with the NAT keys, as an operator runs it: a node that listens on nothing
and names a relay that is down starts (no address of its own) and says, on the terminal, that
it holds no reservation and what to check; its own ID as its relay is refused in one line
before anything loads. Observers: no model is loaded."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarm.core.identity import create_identity, peer_id_of, save_identity
from tests.waiting import wait_node_info

ROOT = Path(__file__).resolve().parents[2]
OTHER = "12D3KooWLp6Fy6k9RjqjvRL2FaZg1x1A1uvBmUuUxsyDAzDzE7oa"


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _observer(folder: Path, relay: str) -> Path:
    folder.mkdir()
    path = folder / "config.toml"
    path.write_text(
        '[node]\nname = "behind-nat"\nrole = "observer"\nrun_dir = "."\nobserve_every_s = 0.5\n'
        f'[p2p]\nrelays = ["{relay}"]\n'
    )
    return path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(120)
def test_join_with_no_listen_address_and_a_relay_that_is_down_says_so_on_the_terminal(
    tmp_path: Path,
) -> None:
    config = _observer(tmp_path / "node", f"/ip4/127.0.0.1/tcp/{_closed_port()}/p2p/{OTHER}")
    out = tmp_path / "terminal.txt"
    with out.open("w") as terminal:
        node = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "swarm.cli",
                "join",
                "--display",
                "lines",
                "--config",
                str(config),
                "--listen",
                "",
            ],
            stdout=terminal,
            stderr=subprocess.STDOUT,
            env=_env(),
        )
    try:
        info = wait_node_info(tmp_path / "node", 60, "node.json")
        assert info["addrs"] == []  # listens on nothing, and no relay holds a reservation
        deadline = time.monotonic() + 30
        while "no relay of 1 holds a reservation" not in out.read_text():
            assert node.poll() is None and time.monotonic() < deadline, out.read_text()[-2000:]
            time.sleep(0.2)
        text = out.read_text()
        assert "WARNING: no reservation on relay /ip4/127.0.0.1/" in text
        assert "cannot connect to it (is it up, at that address?)" in text
    finally:
        node.send_signal(signal.SIGINT)
        try:
            node.wait(timeout=30)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait(timeout=10)


@pytest.mark.timeout(120)
def test_join_refuses_its_own_id_as_its_relay_in_one_line(tmp_path: Path) -> None:
    key = create_identity()
    folder = tmp_path / "node"
    config = _observer(folder, f"/ip4/192.0.2.1/tcp/4001/p2p/{peer_id_of(key)}")
    save_identity(key, folder / "identity.key")
    result = subprocess.run(
        [sys.executable, "-m", "swarm.cli", "join", "--config", str(config), "--listen", ""],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert "p2p.relays[0] is this node itself" in line and "relay_service = true" in line


@pytest.mark.timeout(120)
def test_config_accepts_a_relay_only_node_and_warns_about_a_loopback_relay(tmp_path: Path) -> None:
    node = _observer(tmp_path / "node", f"/dns4/relay.example.org/tcp/4001/p2p/{OTHER}")
    node.write_text(node.read_text().replace("[p2p]\n", '[p2p]\nlisten = ""\n'))
    accepted = subprocess.run(
        [sys.executable, "-m", "swarm.cli", "config", "--config", str(node)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert accepted.returncode == 0, accepted.stderr[-2000:]
    assert accepted.stderr == ""  # nothing to warn about
    relay = tmp_path / "relay.toml"
    relay.write_text(
        '[node]\nrole = "observer"\nrun_dir = "relay"\n'
        '[p2p]\nlisten = "/ip4/127.0.0.1/tcp/0"\nrelay_service = true\n'
    )
    warned = subprocess.run(
        [sys.executable, "-m", "swarm.cli", "config", "--config", str(relay)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert warned.returncode == 0, warned.stderr[-2000:]
    (line,) = warned.stderr.strip().splitlines()
    assert "is a loopback address: only peers on this machine can use this relay" in line


def _join(args: list[str], out: Path) -> subprocess.Popen:
    with out.open("w") as terminal:
        return subprocess.Popen(
            [sys.executable, "-m", "swarm.cli", "join", "--display", "lines", *args],
            stdout=terminal,
            stderr=subprocess.STDOUT,
            env=_env(),
        )


def _stop(nodes: list[subprocess.Popen]) -> None:
    for node in nodes:
        node.send_signal(signal.SIGINT)
    for node in nodes:
        try:
            node.wait(timeout=30)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait(timeout=10)


@pytest.mark.timeout(180)
def test_the_relay_preset_holds_a_reservation_for_a_node_that_listens_on_nothing(
    tmp_path: Path,
) -> None:
    """The recipe of docs/OPERATIONS.md on one machine: node_config/relay.toml as shipped
    (but on 127.0.0.1), and a node naming it; what the recipe says to check is there."""
    nodes: list[subprocess.Popen] = []
    try:
        nodes.append(
            _join(
                [
                    "--config",
                    str(ROOT / "node_config" / "relay.toml"),
                    "--run-dir",
                    str(tmp_path / "relay"),
                    "--listen",
                    f"/ip4/127.0.0.1/tcp/{_closed_port()}",
                    "--metrics",
                    "",
                ],
                tmp_path / "relay.txt",
            )
        )
        relay = wait_node_info(tmp_path / "relay", 60, "the relay's node.json")["addrs"][0]
        config = _observer(tmp_path / "node", relay)
        nodes.append(_join(["--config", str(config), "--listen", ""], tmp_path / "node.txt"))
        info = wait_node_info(tmp_path / "node", 60, "node.json")
        assert info["addrs"] == [f"{relay}/p2p-circuit/p2p/{info['peer_id']}"]
        log = (tmp_path / "node" / "node.log").read_text()
        assert f"relay {relay} holds a reservation for this node" in log
        assert "WARNING" not in (tmp_path / "node.txt").read_text()
    finally:
        _stop(nodes)
