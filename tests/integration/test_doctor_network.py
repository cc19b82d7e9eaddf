"""`swarm-node doctor --network` as an operator runs it, against real peers on 127.0.0.1.

One process (`doctor_peers.py`) holds a peer of each kind a bootstrap address can lead to:
an open node, a node with a swarm key (serving an announcement dated ten minutes ahead),
one with another key, one whose allow-list names someone else, a host speaking a later
version of swarm-node's protocols, a listener that never says a word, and one whose backlog
is full (its connection requests are dropped, as by a firewall). Each test runs the doctor
as a process on a config naming some of them and reads its lines and exit code. The peers'
process ends when its stdin closes (the fixture's finally, or the test run dying) or after
its lifetime.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from swarm.core.identity import create_identity, peer_id_of, save_identity
from swarm.p2p.swarm_key import write_key_file

ROOT = Path(__file__).resolve().parents[2]
KEY = bytes.fromhex("ab" * 32)
OTHER_KEY = "cd" * 32
SOMEONE = "12D3KooWLp6Fy6k9RjqjvRL2FaZg1x1A1uvBmUuUxsyDAzDzE7oa"
SPEC = {
    "open": {"kind": "node"},
    "open2": {"kind": "node"},
    "open3": {"kind": "node"},
    "keyed": {"kind": "node", "psk": KEY.hex(), "ahead_s": 600},
    "other_key": {"kind": "node", "psk": OTHER_KEY},
    "listed": {"kind": "node", "allow_list": [SOMEONE]},
    "v2": {"kind": "v2"},
    "silent": {"kind": "silent"},
    "blackhole": {"kind": "blackhole"},
}
STEP_S = 1.5  # the doctor's --timeout: each step of a dial


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


@pytest.fixture(scope="module")
def peers() -> Iterator[dict]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.doctor_peers", json.dumps(SPEC)],
        cwd=ROOT,
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready = json.loads(proc.stdout.readline() or "{}")
        assert ready.get("event") == "ready", ready
        yield ready["peers"]
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_folder(
    folder: Path,
    bootstrap: list[str],
    *,
    key: bytes | None = None,
    listen: str = "/ip4/127.0.0.1/tcp/0",
) -> tuple[Path, str]:
    """A node folder with its own identity and config; (the config, the node's peer ID)."""
    folder.mkdir(exist_ok=True)
    identity = create_identity()
    save_identity(identity, folder / "identity.key")
    p2p = f"listen = {json.dumps(listen)}\nbootstrap = {json.dumps(bootstrap)}\n"
    if key is not None:
        write_key_file(folder / "swarm.key", key)
        p2p += 'psk_file = "swarm.key"\n'
    config = folder / "config.toml"
    config.write_text(f'[node]\nrun_dir = "."\n[p2p]\n{p2p}')
    return config, peer_id_of(identity)


def run_doctor(config: Path) -> tuple[int, str]:
    """`swarm-node doctor --network` as a process: (exit code, what it printed)."""
    done = subprocess.run(
        [sys.executable, "-m", "swarm.cli", "doctor", "--network", "--timeout", str(STEP_S)]
        + ["--config", str(config)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    return done.returncode, done.stdout + done.stderr


def doctor(folder: Path, bootstrap: list[str], **node) -> tuple[int, str, str]:
    """A node folder, and the doctor run on it: (exit code, the node's peer ID, its output)."""
    config, own_id = node_folder(folder, bootstrap, **node)
    code, out = run_doctor(config)
    return code, own_id, out


def line(output: str, addr: str) -> str:
    """The one line about `addr`."""
    found = [x for x in output.splitlines() if f"bootstrap {addr}:" in x]
    assert len(found) == 1, output
    return found[0]


@pytest.mark.timeout(90)
def test_a_reached_peer_is_one_ok_line_and_exit_0(peers: dict, tmp_path: Path) -> None:
    addr = peers["open"]["addr"]
    code, _, out = doctor(tmp_path / "n", [addr])
    assert code == 0, out
    assert line(out, addr).startswith(f"ok       bootstrap {addr}: reached: in ")
    assert "no swarm key on either side" in line(out, addr)
    assert "network: can take part: 1 of 1 bootstrap peers reached" in out
    assert "seen as: peers see this node's connections come from 127.0.0.1" in out
    assert "AutoNAT: undecided: 1 of 1 peers dialled this node back at /ip4/127.0.0.1/tcp/" in out
    assert "clock: not measured: no message on the wire carries a peer's current time" in out
    assert "Traceback" not in out


@pytest.mark.timeout(90)
def test_a_port_nothing_listens_on_is_refused_and_exit_1(peers: dict, tmp_path: Path) -> None:
    port = _closed_port()
    addr = f"/ip4/127.0.0.1/tcp/{port}/p2p/{peers['open']['peer_id']}"
    code, _, out = doctor(tmp_path / "n", [addr])
    assert code == 1, out
    assert line(out, addr).startswith(f"PROBLEM  bootstrap {addr}: refused: nothing listens at ")
    assert "network: cannot take part: none of 1 bootstrap addresses reached" in out


@pytest.mark.timeout(90)
def test_a_peer_that_accepts_but_never_answers_times_out(peers: dict, tmp_path: Path) -> None:
    addr = peers["silent"]["addr"]
    code, _, out = doctor(tmp_path / "n", [addr])
    assert code == 1, out
    assert (
        f"timed out: it accepted the TCP connection but said nothing within {STEP_S:g} s"
        in line(out, addr)
    )


@pytest.mark.timeout(90)
def test_a_dropped_connection_request_times_out(peers: dict, tmp_path: Path) -> None:
    addr = peers["blackhole"]["addr"]
    code, _, out = doctor(tmp_path / "n", [addr])
    assert code == 1, out
    assert f"timed out: no answer to the TCP connection within {STEP_S:g} s" in line(out, addr)


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("peer", "key", "says"),
    [
        ("other_key", KEY, "its first bytes do not decrypt to libp2p's with this node's key"),
        ("open", KEY, "it has none (it speaks libp2p in plain text) and this node has"),
        ("keyed", None, "it runs a private swarm (its first bytes are not plain libp2p)"),
    ],
    ids=["another-key", "peer-has-none", "node-has-none"],
)
def test_a_swarm_key_mismatch_is_named(
    peers: dict, tmp_path: Path, peer: str, key: bytes | None, says: str
) -> None:
    addr = peers[peer]["addr"]
    code, _, out = doctor(tmp_path / "n", [addr], key=key)
    assert code == 1, out
    assert f"bootstrap {addr}: wrong swarm key: {says}" in line(out, addr)


@pytest.mark.timeout(90)
def test_the_same_swarm_key_reaches_and_the_clock_bound_shows(peers: dict, tmp_path: Path) -> None:
    addr = peers["keyed"]["addr"]
    code, _, out = doctor(tmp_path / "n", [addr], key=KEY)
    assert code == 0, out
    assert "reached: in " in line(out, addr) and "same swarm key" in line(out, addr)
    # the peer serves an announcement dated 600 s ahead: a clock off by at least that
    clock = next(x for x in out.splitlines() if x.split()[1:2] == ["clock:"])
    assert clock.startswith("warning  clock: ") and "past verify.max_future_s (300 s)" in clock
    assert "s ahead of this machine's clock" in clock


@pytest.mark.timeout(90)
def test_a_peer_whose_allow_list_lacks_this_node_says_so(peers: dict, tmp_path: Path) -> None:
    addr = peers["listed"]["addr"]
    code, own_id, out = doctor(tmp_path / "n", [addr])
    assert code == 1, out
    assert (
        f"not on its allow-list: it closed the connection once the handshake named this node ({own_id})"
        in line(out, addr)
    )


@pytest.mark.timeout(90)
def test_a_peer_of_another_protocol_version_says_which(peers: dict, tmp_path: Path) -> None:
    addr = peers["v2"]["addr"]
    code, _, out = doctor(tmp_path / "n", [addr])
    assert code == 1, out
    assert (
        "other protocol version: it speaks /swarm/blob/2.0.0, /swarm/px/2.0.0, this node "
        "/swarm/blob/1.0.0, /swarm/px/1.0.0" in line(out, addr)
    )


@pytest.mark.timeout(90)
def test_another_peer_at_the_address_is_a_wrong_peer_id(peers: dict, tmp_path: Path) -> None:
    real = peers["open"]
    addr = real["addr"].rsplit("/p2p/", 1)[0] + f"/p2p/{peers['open2']['peer_id']}"
    code, _, out = doctor(tmp_path / "n", [addr])
    assert code == 1, out
    assert f"wrong peer ID: another peer answers there ({real['peer_id']})" in line(out, addr)


@pytest.mark.timeout(90)
def test_one_reached_peer_is_enough_the_others_are_warnings(peers: dict, tmp_path: Path) -> None:
    refused = f"/ip4/127.0.0.1/tcp/{_closed_port()}/p2p/{peers['open2']['peer_id']}"
    reached = peers["open"]["addr"]
    code, _, out = doctor(tmp_path / "n", [refused, reached])
    assert code == 0, out
    assert line(out, refused).startswith(f"warning  bootstrap {refused}: refused: ")
    assert line(out, reached).startswith(f"ok       bootstrap {reached}: reached: ")
    assert "network: can take part: 1 of 2 bootstrap peers reached" in out


@pytest.mark.timeout(90)
def test_three_peers_that_dial_back_make_autonat_public(peers: dict, tmp_path: Path) -> None:
    addrs = [peers[name]["addr"] for name in ("open", "open2", "open3")]
    code, _, out = doctor(tmp_path / "n", addrs)
    assert code == 0, out
    assert "AutoNAT: public: 3 of 3 peers dialled this node back at /ip4/127.0.0.1/tcp/" in out


@pytest.mark.timeout(90)
def test_no_bootstrap_but_itself_and_listening_is_a_first_node(tmp_path: Path) -> None:
    code, own_id, out = doctor(tmp_path / "n", [])
    assert code == 0, out
    assert "network: no bootstrap peer but itself: a first node" in out
    # a config shared by a swarm's nodes names this one too: that line is skipped, not dialled
    own = f"/ip4/127.0.0.1/tcp/{_closed_port()}/p2p/{own_id}"
    config = tmp_path / "n" / "config.toml"
    config.write_text(config.read_text().replace("bootstrap = []", f"bootstrap = [{own!r}]"))
    code, out = run_doctor(config)
    assert code == 0, out
    assert f"ok       bootstrap {own}: this node itself: " in out


@pytest.mark.timeout(90)
def test_no_bootstrap_and_listening_on_nothing_cannot_take_part(tmp_path: Path) -> None:
    code, _, out = doctor(tmp_path / "n", [], listen="")
    assert code == 1, out
    assert (
        "PROBLEM  network: cannot take part: no bootstrap peer (p2p.bootstrap), it listens on nothing"
        in out
    )
    assert "AutoNAT: not asked: this node listens on nothing" in out


@pytest.mark.timeout(90)
def test_json_carries_the_same_findings_and_the_verdict(tmp_path: Path) -> None:
    config, _ = node_folder(tmp_path / "n", [])
    done = subprocess.run(
        [sys.executable, "-m", "swarm.cli", "doctor", "--network", "--json", "-c", str(config)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["healthy"] is True
    checks = {f["check"]: f for f in report["findings"]}
    assert checks["network"]["level"] == "ok" and "AutoNAT" in checks


def test_help_explains_the_option_and_a_mixed_request_is_one_line() -> None:
    cli = [sys.executable, "-m", "swarm.cli", "doctor"]
    shown = subprocess.run([*cli, "--help"], capture_output=True, text=True, env=_env(), timeout=60)
    text = " ".join(shown.stdout.split())
    assert "--network Check only the network, as this node would join it" in text
    assert "Exits 0 when the node can take part" in text
    assert "--timeout" in text
    mixed = subprocess.run(
        [*cli, "--network", "--gpu"], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert mixed.returncode == 2
    assert mixed.stderr.strip().splitlines() == [
        "error: --network checks only the network: give it without --gpu and --ledger"
    ]
