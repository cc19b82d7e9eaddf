"""swarm-node's libp2p transport and a js-libp2p peer in one private network, on 127.0.0.1.

The js peer (tests/interop/js_peer.mjs: js-libp2p 3 with TCP, Noise, Yamux, the standard
pnet connection protector and GossipSub) reads the key file that `swarm.p2p.swarm_key`
writes (`/key/swarm/psk/1.0.0/`, `/base16/`, the key), connects to `Libp2pTransport`s and
exchanges gossip messages with them on a topic of ours, both ways, relayed both ways.

Message IDs: in a triangle (two of our transports and the js peer, each in the others'
mesh) every message reaches each node by two paths, and every node must deliver it once.
The IDs js computes for our messages are read back and compared with ours.

npm packages are installed once (pinned by package-lock.json) into a cache folder outside
the repository, `$SWARM_NODE_CACHE/interop-js/<hash>` (default ~/.cache/swarm-node); with
that folder present no network is needed. Without `node` and `npm`, or when the install
fails (no network), the test is skipped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from libp2p.peer.id import ID

from swarm.p2p.libp2p import Libp2pTransport, TransportSettings
from swarm.p2p.swarm_key import generate_key, read_key_file, write_key_file
from swarm.wire import rollout_topic
from tests.waiting import wait_until

HERE = Path(__file__).resolve().parent
FILES = ("package.json", "package-lock.json")
SCRIPTS = ("js_peer.mjs", "node20.mjs")
TOPIC = rollout_topic("interop")


def _cache_root() -> Path:
    root = os.environ.get("SWARM_NODE_CACHE") or Path.home() / ".cache" / "swarm-node"
    return Path(root) / "interop-js"


def js_folder() -> Path:
    """The folder holding the installed packages (installing them the first time)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed for the js-libp2p interop test")
    digest = hashlib.sha256(b"".join((HERE / f).read_bytes() for f in FILES)).hexdigest()[:12]
    folder = _cache_root() / digest
    done = folder / ".installed"
    if not done.exists():
        folder.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            shutil.copy(HERE / name, folder / name)
        try:
            proc = subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund"],
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=600,
            )
        except subprocess.TimeoutExpired:
            pytest.skip("npm ci timed out (no network?)")
        if proc.returncode != 0:
            pytest.skip(f"npm ci failed (no network?): {proc.stderr.strip()[-300:]}")
        done.write_text("ok\n")
    for name in SCRIPTS:  # the repository's version of the peer, every run
        shutil.copy(HERE / name, folder / name)
    return folder


class JsPeer:
    """tests/interop/js_peer.mjs in its own node process, driven over stdin/stdout."""

    def __init__(self, folder: Path, key_file: Path) -> None:
        self.proc = subprocess.Popen(
            ["node", "js_peer.mjs", str(key_file), TOPIC, "120"],
            cwd=folder,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = json.loads(self.proc.stdout.readline())
        self.peer_id: str = ready["peer_id"]

    def call(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        assert reply["ok"], reply
        return reply

    def close(self) -> None:
        try:
            self.proc.stdin.write('{"cmd": "exit"}\n')
            self.proc.stdin.close()
            self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def network(tmp_path) -> Iterator[dict]:
    folder = js_folder()
    key_file = tmp_path / "swarm.key"
    write_key_file(key_file, generate_key())
    parts: dict = {"key_file": key_file, "folder": folder, "transports": [], "js": []}
    try:
        yield parts
    finally:
        for js in parts["js"]:
            js.close()
        for transport in parts["transports"]:
            transport.close()


def _transport(network: dict, bootstrap=()) -> Libp2pTransport:
    t = Libp2pTransport(
        TransportSettings(
            listen_addr="/ip4/127.0.0.1/tcp/0",
            psk=read_key_file(network["key_file"]).hex,  # the same file the js peer reads
            bootstrap=tuple(bootstrap),
            peer_exchange=False,  # the js peer is the only way between nodes not bootstrapped
        )
    )
    t.start()
    t.subscribe(TOPIC, None)
    network["transports"].append(t)
    return t


def _js(network: dict, *targets: Libp2pTransport) -> JsPeer:
    js = JsPeer(network["folder"], network["key_file"])
    network["js"].append(js)
    for t in targets:
        js.call(cmd="dial", addr=t.listen_addrs()[0])
    return js


def _until(check, timeout: float = 20.0) -> bool:
    return wait_until(check, timeout, interval=0.1)


class Deliveries:
    """What each of our transports delivered so far: (data, origin) -> times."""

    def __init__(self, *transports: Libp2pTransport) -> None:
        self.transports = transports
        self.seen = {t.peer_id: Counter() for t in transports}

    def update(self) -> dict[str, Counter]:
        for t in self.transports:
            self.seen[t.peer_id].update((m.data, m.source) for m in t.receive())
        return self.seen


def _js_deliveries(js: JsPeer) -> Counter:
    messages = js.call(cmd="received")["messages"]
    return Counter((bytes.fromhex(m["data"]), m["from"]) for m in messages)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_js_peer_joins_the_private_network_and_relays_both_ways(network):
    a, b = _transport(network), _transport(network)  # not connected to each other
    js = _js(network, a, b)
    assert _until(lambda: len(js.call(cmd="mesh")["mesh"]) == 2), js.call(cmd="mesh")
    assert _until(lambda: a.wait_for_topic_peers(TOPIC, 1, 1) >= 1)
    assert _until(lambda: b.wait_for_topic_peers(TOPIC, 1, 1) >= 1)
    assert {p.peer_id for p in a.peers()} == {p.peer_id for p in b.peers()} == {js.peer_id}
    ours = Deliveries(a, b)

    a.publish(TOPIC, b"from A")  # reaches b only through the js peer
    js.call(cmd="publish", hex=b"from js".hex())
    b.publish(TOPIC, b"from B")
    expected = {
        a.peer_id: {(b"from js", js.peer_id): 1, (b"from B", b.peer_id): 1},
        b.peer_id: {(b"from A", a.peer_id): 1, (b"from js", js.peer_id): 1},
    }
    assert _until(lambda: ours.update() == expected), ours.update()
    assert _until(
        lambda: _js_deliveries(js) == {(b"from A", a.peer_id): 1, (b"from B", b.peer_id): 1}
    ), _js_deliveries(js)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_message_reaching_a_node_by_two_paths_through_js_is_delivered_once(network):
    a = _transport(network)
    b = _transport(network, bootstrap=a.listen_addrs())
    js = _js(network, a, b)
    assert _until(lambda: len(js.call(cmd="mesh")["mesh"]) == 2)
    assert _until(lambda: a.wait_for_topic_peers(TOPIC, 2, 1) >= 2)
    assert _until(lambda: b.wait_for_topic_peers(TOPIC, 2, 1) >= 2)
    ours = Deliveries(a, b)
    count = 20
    for i in range(count):
        a.publish(TOPIC, b"A%d" % i)
        b.publish(TOPIC, b"B%d" % i)
        js.call(cmd="publish", hex=(b"J%d" % i).hex())
    want_a = {(b"B%d" % i, b.peer_id) for i in range(count)}
    want_a |= {(b"J%d" % i, js.peer_id) for i in range(count)}
    want_b = {(b"A%d" % i, a.peer_id) for i in range(count)}
    want_b |= {(b"J%d" % i, js.peer_id) for i in range(count)}
    assert _until(
        lambda: set(ours.update()[a.peer_id]) == want_a and set(ours.seen[b.peer_id]) == want_b
    )
    want_js = {(b"A%d" % i, a.peer_id) for i in range(count)}
    want_js |= {(b"B%d" % i, b.peer_id) for i in range(count)}
    assert _until(lambda: set(_js_deliveries(js)) == want_js)
    time.sleep(2.0)  # copies by the second path arrive after the first: give them time
    seen_js = _js_deliveries(js)
    for name, seen in (
        ("A", ours.update()[a.peer_id]),
        ("B", ours.seen[b.peer_id]),
        ("js", seen_js),
    ):
        assert max(seen.values()) == 1, (name, [k for k, n in seen.items() if n > 1])

    # What js computes as the ID of our messages: its own default, the protobuf public key
    # and the sequence number, where ours (and go-libp2p's) is the peer ID bytes and the
    # sequence number: the two differ by the peer ID's 2-byte multihash prefix.
    messages = js.call(cmd="received")["messages"]
    ours_from_a = [m for m in messages if m["from"] == a.peer_id]
    peer_bytes = ID.from_base58(a.peer_id).to_bytes()
    for m in ours_from_a:
        seqno = bytes.fromhex(m["seqno"])
        js_id = base64.b64decode(m["msg_id"] + "=" * (-len(m["msg_id"]) % 4))
        assert js_id == peer_bytes[2:] + seqno  # protobuf(public key) + seqno
        assert js_id != peer_bytes + seqno  # not the ID our node computes for it
