"""Peers for `swarm-node doctor --network` to dial, all in one process on 127.0.0.1
(test_doctor_network.py): each kind is a way a bootstrap peer can answer.

Start:   python -m tests.integration.doctor_peers SPEC_JSON [--max-lifetime S]
         SPEC_JSON: {"name": {"kind": KIND, ...options}, ...}
Kinds:
    node       a `Libp2pTransport` (options: "psk" 64 hex characters, "allow_list" peer IDs,
               "ahead_s": serve one signed announcement dated that many seconds ahead)
    v2         a libp2p host that speaks /swarm/px/2.0.0 and /swarm/blob/2.0.0 only
    silent     a TCP listener that accepts connections and never writes a byte
    blackhole  a TCP listener whose one-connection backlog is already full: the kernel drops
               every further connection request (it times out, as behind a dropping firewall)
Prints:  {"event": "ready", "peers": {name: {"peer_id": ..., "addr": ".../p2p/<id>"}}}.
The process exits when stdin closes (its parent died) or after --max-lifetime seconds.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time

import multiaddr
import trio
from libp2p.custom_types import TProtocol

from swarm.core.identity import create_identity, peer_id_of
from swarm.p2p.libp2p import Libp2pTransport, TransportSettings
from swarm.p2p.libp2p.host import build_host
from swarm.tasks import TaskSpec
from swarm.wire import ANNOUNCEMENTS_KEY, GroupAnnouncement, pack_announcements
from swarm.wire.signing import sign_announcement

LOCAL = "/ip4/127.0.0.1/tcp/0"
V2_PROTOCOLS = ("/swarm/px/2.0.0", "/swarm/blob/2.0.0")
# what a peer with no libp2p identity gives as one (the address still needs a /p2p/ part)
NO_ID = "12D3KooWLp6Fy6k9RjqjvRL2FaZg1x1A1uvBmUuUxsyDAzDzE7oa"


def announcement(key_pair, ahead_s: float) -> bytes:
    """An announcements list of one signed announcement dated `ahead_s` s from now."""
    sender = peer_id_of(key_pair)
    item = GroupAnnouncement(
        base_hash="0" * 64,
        blob_hash="0" * 64,
        created_at=time.time() + ahead_s,
        model="m",
        policy_version=0,
        rewards=(0.0,),
        round=0,
        seed_salt=0,
        sender=sender,
        size=64,
        swarm_id="s",
        task=TaskSpec.make("basic_arithmetic", {}, 1, 0),
    )
    return pack_announcements([sign_announcement(item, key_pair)])


def start_node(spec: dict, keep: list) -> dict:
    key_pair = create_identity()
    settings = TransportSettings(
        listen_addr=LOCAL,
        psk=spec.get("psk"),
        allow_list=tuple(spec.get("allow_list", ())),
        peer_exchange=False,
        autonat_interval=0,
    )
    transport = Libp2pTransport(settings, key_pair=key_pair)
    transport.start()
    keep.append(transport)
    if "ahead_s" in spec:
        transport.serve_blob(ANNOUNCEMENTS_KEY, announcement(key_pair, float(spec["ahead_s"])))
    return {"peer_id": transport.peer_id, "addr": transport.listen_addrs()[0]}


def start_v2() -> dict:
    """A host whose swarm protocols are a later version's, in a trio run of its own thread."""
    key_pair = create_identity()
    ready: dict = {}
    started = threading.Event()

    async def refuse(stream) -> None:
        await stream.reset()

    class Violations:  # the host holds a weak reference to a bound method
        def note(self, peer) -> None:
            return None

    violations = Violations()

    async def serve() -> None:
        host = build_host(key_pair, multiaddr.Multiaddr(LOCAL), None, 5.0, violations.note)
        for protocol in V2_PROTOCOLS:
            host.set_stream_handler(TProtocol(protocol), refuse)
        async with host.run([multiaddr.Multiaddr(LOCAL)]):
            ready["addr"] = f"{host.get_transport_addrs()[0]}/p2p/{peer_id_of(key_pair)}"
            started.set()
            await trio.sleep_forever()

    threading.Thread(target=trio.run, args=(serve,), daemon=True).start()
    if not started.wait(30):
        raise RuntimeError("the v2 host did not start")
    return {"peer_id": peer_id_of(key_pair), "addr": ready["addr"]}


def start_silent(keep: list) -> dict:
    """Accepts every connection and holds it, writing nothing."""
    server = socket.create_server(("127.0.0.1", 0))
    keep.append(server)

    def accept() -> None:
        while True:
            conn, _ = server.accept()
            keep.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    return _tcp_peer(server)


def start_blackhole(keep: list) -> dict:
    """A listener never accepting, its backlog of one filled: further SYNs are dropped."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    filler = socket.create_connection(server.getsockname(), timeout=5)
    keep += [server, filler]
    return _tcp_peer(server)


def _tcp_peer(server: socket.socket) -> dict:
    host, port = server.getsockname()
    return {"peer_id": NO_ID, "addr": f"/ip4/{host}/tcp/{port}/p2p/{NO_ID}"}


def start(spec: dict, keep: list) -> dict:
    kind = spec["kind"]
    if kind == "node":
        return start_node(spec, keep)
    if kind == "v2":
        return start_v2()
    if kind == "silent":
        return start_silent(keep)
    if kind == "blackhole":
        return start_blackhole(keep)
    raise ValueError(f"unknown kind {kind!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("--max-lifetime", type=float, default=120.0)
    args = parser.parse_args()
    keep: list = []
    peers = {name: start(spec, keep) for name, spec in json.loads(args.spec).items()}
    print(json.dumps({"event": "ready", "peers": peers}), flush=True)
    # stdin closing (the test ended, or died) or the lifetime ends the process
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait(args.max_lifetime)
    return 0  # the kernel closes every socket; the transports' threads are daemons


if __name__ == "__main__":
    sys.exit(main())
