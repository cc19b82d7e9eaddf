"""Libp2pTransport between real nodes: three separate processes on 127.0.0.1, plus in-process checks.

The process tests share one three-node network (A; B and C bootstrapped from A only, so C
must find B by peer exchange) and run in file order; the kill/restart test comes last
because it changes the network. Every process is started with a lifetime bound and is
killed in the fixture's teardown whatever happens.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.rpc_queue import RpcQueue

from swarm.core.errors import TransportError
from swarm.core.identity import create_identity, peer_id_of
from swarm.p2p.libp2p import MAX_MESSAGE_SIZE, SEND_STALL_S, Libp2pTransport, TransportSettings
from swarm.p2p.libp2p.patches import coalesce
from swarm.p2p.libp2p.peer_exchange import PX_FIRST_DELAY_S, PX_INTERVAL_S
from swarm.p2p.libp2p.pnet import XSalsa20
from tests.integration.transports import started_transports
from tests.waiting import wait_until

HELPER = Path(__file__).with_name("libp2p_peer.py")
TOPIC = "test"
BURST = 200
BLOB_SIZE = 20 * 1024 * 1024


class PeerProcess:
    """A libp2p_peer.py child process and a blocking JSON-lines request channel to it."""

    _ids = itertools.count()

    def __init__(
        self,
        workdir: Path,
        name: str,
        listen: str = "/ip4/127.0.0.1/tcp/0",
        bootstrap: tuple[str, ...] = (),
    ):
        self.name = name
        self.identity = workdir / f"{name}.key"
        self.stderr_path = workdir / f"{name}.{next(self._ids)}.stderr"
        args = [sys.executable, str(HELPER), "--identity", str(self.identity), "--listen", listen]
        args += ["--validator", "raise-on-bad", "--topic", TOPIC, "--max-lifetime", "600"]
        for addr in bootstrap:
            args += ["--bootstrap", addr]
        with open(self.stderr_path, "w") as stderr:
            self.proc = subprocess.Popen(
                args,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                bufsize=1,
            )
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.peer_id = ""
        self.addrs: list[str] = []

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def wait_ready(self, timeout: float = 30.0) -> PeerProcess:
        ready = self._next_line(timeout)
        assert ready.get("event") == "ready", f"{self.name}: unexpected first line {ready}"
        self.peer_id, self.addrs = ready["peer_id"], ready["addrs"]
        return self

    def _next_line(self, timeout: float) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"{self.name}: no output within {timeout} s\n{self.stderr_tail()}"
            ) from None
        if line is None:
            raise AssertionError(f"{self.name}: process exited\n{self.stderr_tail()}")
        return json.loads(line)

    def send(self, cmd: dict) -> int:
        request_id = next(self._ids)
        self.proc.stdin.write(json.dumps({**cmd, "id": request_id}) + "\n")
        self.proc.stdin.flush()
        return request_id

    def reply(self, request_id: int, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            line = self._next_line(max(0.1, deadline - time.monotonic()))
            if line.get("id") == request_id:
                return line

    def request(self, cmd: dict, timeout: float = 30.0) -> dict:
        reply = self.reply(self.send(cmd), timeout)
        assert reply["ok"], f"{self.name}: {cmd['cmd']} failed: {reply.get('error')}"
        return reply

    def received(self, prefix: str) -> int:
        return self.request({"cmd": "received"})["counts"].get(prefix, 0)

    def stats(self) -> dict:
        return self.request({"cmd": "stats"})["stats"]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                self.send({"cmd": "exit"})
                self.proc.wait(timeout=10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        finally:
            self.kill()

    def stderr_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.stderr_path.read_text().splitlines()[-lines:])
        except OSError:
            return ""


def all_received(
    receivers: list[PeerProcess], prefix: str, count: int, timeout: float
) -> dict[str, int]:
    """Wait until every receiver has `count` distinct messages of `prefix`; return the counts."""
    wait_until(lambda: all(r.received(prefix) >= count for r in receivers), timeout)
    return {r.name: r.received(prefix) for r in receivers}


@dataclass
class Network:
    """The shared three-process network: A, and B and C bootstrapped from A only."""

    workdir: Path
    nodes: dict[str, PeerProcess] = field(default_factory=dict)

    def abc(self) -> tuple[PeerProcess, PeerProcess, PeerProcess]:
        return self.nodes["A"], self.nodes["B"], self.nodes["C"]


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Network]:
    net = Network(tmp_path_factory.mktemp("libp2p"))
    try:
        net.nodes["A"] = PeerProcess(net.workdir, "A").wait_ready()
        for name in ("B", "C"):  # bootstrapped from A only: C must find B by peer exchange
            net.nodes[name] = PeerProcess(net.workdir, name, bootstrap=tuple(net.nodes["A"].addrs))
        for name in ("B", "C"):
            net.nodes[name].wait_ready()
        yield net
    finally:
        for node in net.nodes.values():
            node.stop()


@pytest.mark.timeout(60)
def test_peer_exchange_connects_the_whole_mesh(network: Network) -> None:
    a, b, c = network.abc()
    assert wait_until(lambda: b.peer_id in c.request({"cmd": "peers"})["peers"], 15), (
        "C never found B"
    )
    for node in (a, b, c):
        assert node.request({"cmd": "wait_mesh", "n": 2, "timeout": 15})["mesh"] == 2, node.name


@pytest.mark.timeout(90)
def test_every_message_reaches_every_other_node_including_a_burst(
    network: Network,
) -> None:
    nodes = list(network.abc())
    # Paced first, then a burst of BURST per node, all three publishing at the same time.
    for prefix, count in (("paced", 20), ("burst", BURST)):
        pending = [
            (node, node.send({"cmd": "publish", "prefix": f"{prefix}-{node.name}", "count": count}))
            for node in nodes
        ]
        for node, request_id in pending:
            assert node.reply(request_id, timeout=60)["ok"], node.name
        for sender in nodes:
            receivers = [n for n in nodes if n is not sender]
            counts = all_received(receivers, f"{prefix}-{sender.name}", count, timeout=30)
            assert counts == {r.name: count for r in receivers}, (
                f"{prefix} from {sender.name}: {counts}"
            )
    for node in nodes:
        stats = node.stats()
        assert stats["outbound_dropped"] == 0 and stats["inbox_dropped"] == 0, (node.name, stats)
        assert stats["published"] == 20 + BURST, (node.name, stats)


@pytest.mark.timeout(60)
def test_a_raising_validator_rejects_without_taking_the_host_down(
    network: Network,
) -> None:
    a, b, c = network.abc()
    a.request({"cmd": "publish", "prefix": "bad", "count": 5})  # every receiver's validator raises
    a.request({"cmd": "publish", "prefix": "after-bad", "count": 20})
    assert all_received([b, c], "after-bad", 20, timeout=20) == {"B": 20, "C": 20}
    for node in (b, c):
        assert node.received("bad") == 0
        assert node.stats()["rejected"].get("validator_error", 0) >= 5, node.name


@pytest.mark.timeout(60)
def test_a_20_mb_blob_is_fetched_intact(network: Network) -> None:
    _, b, c = network.abc()
    served = b.request({"cmd": "serve_blob", "key": "weights/v1", "size": BLOB_SIZE, "seed": 7})
    fetched = c.request(
        {"cmd": "fetch_blob", "peer": b.peer_id, "key": "weights/v1", "timeout": 40}, timeout=50
    )
    assert fetched["size"] == BLOB_SIZE and fetched["sha256"] == served["sha256"]
    missing = c.reply(
        c.send({"cmd": "fetch_blob", "peer": b.peer_id, "key": "nope", "timeout": 10})
    )
    assert not missing["ok"] and "TransportError" in missing["error"]


@pytest.mark.timeout(30)
def test_an_oversized_publish_raises_transport_error(network: Network) -> None:
    reply = network.nodes["A"].request({"cmd": "publish_oversized"})
    assert reply["raised"] == "TransportError" and str(MAX_MESSAGE_SIZE) in reply["message"]


@pytest.mark.timeout(90)
def test_a_frozen_node_does_not_slow_the_others_and_is_dropped(
    network: Network,
) -> None:
    a, b, c = network.abc()
    c.proc.send_signal(signal.SIGSTOP)  # C stops reading: A's queue to C fills and stalls
    try:
        began = time.monotonic()
        a.request({"cmd": "publish", "prefix": "frozen", "count": 300, "size": 60_000})
        assert all_received([b], "frozen", 300, timeout=30) == {"B": 300}
        # Back-pressure ignores a queue that stopped draining, so B is not held up by C.
        assert time.monotonic() - began < SEND_STALL_S
        assert wait_until(lambda: a.stats()["stalled_peers"] >= 1, SEND_STALL_S + 10)
        stats = a.stats()
        assert stats["outbound_discarded"] + stats["outbound_dropped"] > 0  # counted, not silent
    finally:
        c.proc.send_signal(signal.SIGCONT)
    assert c.request({"cmd": "wait_mesh", "n": 2, "timeout": 20})["mesh"] == 2
    assert a.request({"cmd": "wait_mesh", "n": 2, "timeout": 20})["mesh"] == 2
    a.request({"cmd": "publish", "prefix": "after-thaw", "count": 20})
    assert all_received([c], "after-thaw", 20, timeout=20) == {"C": 20}


@pytest.mark.timeout(90)
def test_a_killed_node_does_not_stop_the_others_and_rejoins_after_restart(
    network: Network,
) -> None:
    a, b, c = network.abc()
    c_id, c_listen = c.peer_id, c.addrs[0].split("/p2p/")[0]
    c.kill()
    for sender, receiver in ((a, b), (b, a)):
        sender.request({"cmd": "publish", "prefix": f"after-kill-{sender.name}", "count": 50})
        assert all_received([receiver], f"after-kill-{sender.name}", 50, timeout=20) == {
            receiver.name: 50
        }

    restarted = PeerProcess(network.workdir, "C", listen=c_listen, bootstrap=tuple(a.addrs))
    network.nodes["C"] = restarted
    restarted.wait_ready()
    assert restarted.peer_id == c_id, "same identity file, same peer ID"
    assert restarted.request({"cmd": "wait_mesh", "n": 2, "timeout": 20})["mesh"] == 2
    for sender in (a, b):
        assert sender.request({"cmd": "wait_mesh", "n": 2, "timeout": 20})["mesh"] == 2, sender.name
        sender.request({"cmd": "publish", "prefix": f"after-restart-{sender.name}", "count": 50})
        counts = all_received([restarted], f"after-restart-{sender.name}", 50, timeout=20)
        assert counts == {"C": 50}, f"from {sender.name}: {counts}"


# ---------------------------------------------------------------------------------------
# In-process checks of the access options (cheaper than processes; same code paths).
# ---------------------------------------------------------------------------------------


@pytest.fixture
def started() -> Iterator[Callable[..., Libp2pTransport]]:
    with started_transports(topics=[TOPIC]) as start:
        yield start


def _drain_until(transport: Libp2pTransport, count: int, timeout: float) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += [m.data for m in transport.receive(timeout=0.1)]
    return got


@pytest.mark.timeout(60)
def test_allow_list_closes_connections_from_unlisted_peers(
    started: Callable[..., Libp2pTransport],
) -> None:
    listed_key = create_identity()
    gatekeeper = started(allow_list=[peer_id_of(listed_key)])
    listed = started(key_pair=listed_key, bootstrap=gatekeeper.listen_addrs())
    outsider = started(bootstrap=gatekeeper.listen_addrs())
    assert listed.wait_for_topic_peers(TOPIC, 1, timeout=10) == 1
    assert wait_until(lambda: gatekeeper.stats().refused_peers >= 1, 10)
    outsider.publish(TOPIC, b"from outside")
    listed.publish(TOPIC, b"from inside")
    assert _drain_until(gatekeeper, 2, timeout=3) == [b"from inside"]
    assert {p.peer_id for p in gatekeeper.peers()} == {listed.peer_id}


@pytest.mark.timeout(60)
def test_private_network_key_admits_only_peers_with_the_same_key(
    started: Callable[..., Libp2pTransport],
) -> None:
    key, other_key = "ab" * 32, "cd" * 32
    hub = started(psk=key)
    member = started(psk=key, bootstrap=hub.listen_addrs())
    stranger = started(psk=other_key, bootstrap=hub.listen_addrs(), dial_timeout=2.0)
    assert member.wait_for_topic_peers(TOPIC, 1, timeout=10) == 1
    time.sleep(2.5)  # at least one full (bounded) dial attempt by the stranger
    assert {p.peer_id for p in hub.peers()} == {member.peer_id}
    assert stranger.peers() == []


@pytest.mark.timeout(60)
def test_a_peer_with_another_swarm_key_or_none_is_logged_once_with_the_reason(
    started: Callable[..., Libp2pTransport], caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="swarm.p2p.libp2p.pnet")
    key = os.urandom(32).hex()  # a network of its own: nothing noted before
    hub = started(psk=key)
    port = int(hub.listen_addrs()[0].split("/")[4])
    stranger = started(psk=os.urandom(32).hex(), bootstrap=hub.listen_addrs(), dial_timeout=2.0)

    def said(text: str) -> list[str]:
        return [r.getMessage() for r in caplog.records if text in r.getMessage()]

    refused_in = "refused a connection from 127.0.0.1: it has another swarm key"
    refused_out = f"dialling 127.0.0.1:{port} failed: it has another swarm key"
    assert wait_until(lambda: said(refused_in) and said(refused_out), timeout=20), caplog.text
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"\x13/multistream/1.0.0\n")  # a libp2p peer without a key
        assert wait_until(lambda: said("127.0.0.1: it has no swarm key"), timeout=10)
    plain = started()  # a node without a key, dialled by one with a key
    plain_port = int(plain.listen_addrs()[0].split("/")[4])
    started(psk=key, bootstrap=plain.listen_addrs(), dial_timeout=2.0)
    no_key_out = f"dialling 127.0.0.1:{plain_port} failed: it has no swarm key"
    assert wait_until(lambda: said(no_key_out), timeout=20), caplog.text
    time.sleep(2.5)  # the stranger dials again at least once
    assert stranger.peers() == [] and hub.peers() == []
    assert len(said(refused_in)) == len(said(refused_out)) == 1  # once per peer and reason


@pytest.mark.timeout(30)
def test_the_private_network_speaks_the_libp2p_pnet_spec(
    started: Callable[..., Libp2pTransport],
) -> None:
    """A 24-byte nonce first from each side, then XSalsa20: what go, js and rust libp2p speak."""
    key = bytes(range(32))
    node = started(psk=key.hex())
    port = int(node.listen_addrs()[0].split("/")[4])
    header = b"\x13/multistream/1.0.0\n"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        nonce = os.urandom(24)
        sock.sendall(nonce + XSalsa20(key, nonce).xor(header))
        reply = b""
        while len(reply) < 24 + len(header):
            chunk = sock.recv(4096)
            assert chunk, f"connection closed after {len(reply)} bytes"
            reply += chunk
    assert XSalsa20(key, reply[:24]).xor(reply[24 : 24 + len(header)]) == header


@pytest.mark.timeout(60)
def test_a_peer_without_peer_exchange_is_noted_once_at_debug(
    started: Callable[..., Libp2pTransport], caplog: pytest.LogCaptureFixture
) -> None:
    """Other libp2p implementations do not speak /swarm/px/1.0.0: normal, not an error."""
    caplog.set_level(logging.DEBUG)
    asker = started()
    other = started(bootstrap=asker.listen_addrs(), peer_exchange=False, answer_peer_exchange=False)
    assert other.wait_for_topic_peers(TOPIC, 1, timeout=10) == 1
    time.sleep(PX_FIRST_DELAY_S + PX_INTERVAL_S + 1.0)  # the first round and one more
    px_records = [r for r in caplog.records if "peer exchange" in r.getMessage()]
    loud = [
        r
        for r in caplog.records
        if r.levelno >= logging.WARNING and ("/swarm/px" in r.getMessage() or r.exc_info)
    ]
    assert loud == []
    noted = [r for r in px_records if other.peer_id in r.getMessage()]
    assert len(noted) == 1 and noted[0].levelno == logging.DEBUG
    assert "does not speak" in noted[0].getMessage()


@pytest.mark.timeout(60)
def test_garbage_on_the_pubsub_stream_is_contained(started: Callable[..., Libp2pTransport]) -> None:
    """In py-libp2p an unparsable RPC stops the receiving host; here it only drops that peer."""
    victim = started()
    rogue = started(bootstrap=victim.listen_addrs())
    assert rogue.wait_for_topic_peers(TOPIC, 1, timeout=10) == 1

    # A length-prefixed frame that is no RPC, on a pubsub stream of its own.
    rogue.write_raw_stream(victim.peer_id, PROTOCOL_ID_V11, b"\x05" + b"\xff" * 5)
    assert wait_until(lambda: any("DecodeError" in k for k in victim.stats().handler_errors), 10)
    # The victim is alive, and the rogue (which bootstraps from it) reconnects and is heard.
    assert wait_until(lambda: _publish_and_hear(rogue, victim, b"after garbage"), 20)


def _publish_and_hear(sender: Libp2pTransport, receiver: Libp2pTransport, data: bytes) -> bool:
    if sender.wait_for_topic_peers(TOPIC, 1, timeout=1) < 1:
        return False
    sender.publish(TOPIC, data)
    return data in _drain_until(receiver, 1, timeout=1)


@pytest.mark.timeout(60)
def test_a_bootstrap_peer_that_comes_up_later_is_reached(
    started: Callable[..., Libp2pTransport],
) -> None:
    late_key, port = create_identity(), _free_port()
    waiting = started(bootstrap=[f"/ip4/127.0.0.1/tcp/{port}/p2p/{peer_id_of(late_key)}"])
    # Nobody listens yet: start() succeeded anyway, and the dials keep failing, with backoff.
    assert wait_until(lambda: waiting.stats().dial_failures >= 2, 10)
    assert waiting.peers() == []
    started(key_pair=late_key, listen_addr=f"/ip4/127.0.0.1/tcp/{port}")
    assert waiting.wait_for_topic_peers(TOPIC, 1, timeout=20) == 1


@pytest.mark.timeout(30)
def test_close_is_prompt_and_final(started: Callable[..., Libp2pTransport]) -> None:
    node = started()
    peer = started(bootstrap=node.listen_addrs())
    assert peer.wait_for_topic_peers(TOPIC, 1, timeout=10) == 1
    began = time.monotonic()
    node.close()
    assert time.monotonic() - began < 5.0
    with pytest.raises(TransportError, match="closed"):
        node.publish(TOPIC, b"after close")
    node.close()  # a second close is harmless


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_queued_rpcs_are_batched_in_order_up_to_the_limit() -> None:
    rpcs = [
        rpc_pb2.RPC(publish=[rpc_pb2.Message(data=bytes([i]) * 1000, topicIDs=[TOPIC])])
        for i in range(5)
    ]
    queue = RpcQueue()
    for rpc in rpcs[1:]:
        queue.push(rpc)
    batch, carry = coalesce(rpcs[0], queue, limit=2500)
    assert [m.data[0] for m in batch.publish] == [0, 1]  # two fit, in order
    assert carry is not None and carry.publish[0].data[0] == 2  # the next one is kept, not lost
    batch, carry = coalesce(carry, queue, limit=10_000)
    assert [m.data[0] for m in batch.publish] == [2, 3, 4] and carry is None and len(queue) == 0


def test_bad_constructor_arguments_raise_transport_error() -> None:
    with pytest.raises(TransportError, match="64 hex"):
        Libp2pTransport(TransportSettings(psk="short"))
    with pytest.raises(TransportError, match="bootstrap"):
        Libp2pTransport(TransportSettings(bootstrap=("/ip4/127.0.0.1/tcp/1",)))
    with pytest.raises(TransportError, match="listen address"):
        Libp2pTransport(TransportSettings(listen_addr="/ip4/127.0.0.1/udp/1"))
    with pytest.raises(TransportError, match="not started"):
        Libp2pTransport().publish(TOPIC, b"x")
