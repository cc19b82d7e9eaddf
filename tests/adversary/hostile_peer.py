"""A hostile swarm member in its own process: a real `Libp2pTransport` that publishes what it is told.

The adversary test crafts the attacks (it knows which reason each must be rejected with)
and hands them over as hex; this process puts them on the swarm's gossip topic from its
own libp2p identity, exactly as a malicious node would, and reports what honest nodes
published (a copycat needs something to copy).

Start:   python -m tests.adversary.hostile_peer --identity KEY --bootstrap ADDR --topic T
Prints:  {"event": "ready", "peer_id": ...}; then answers one JSON command per line:
    {"cmd": "wait_mesh", "n": 1, "timeout": 30}  -> {"mesh": bool}
    {"cmd": "publish", "hex": ["..."]}            -> {"published": n}
    {"cmd": "received"}                            -> {"messages": ["hex", ...]} (all so far)
    {"cmd": "exit"}
It exits by itself when stdin closes or after --max-lifetime seconds.
"""

from __future__ import annotations

import argparse
import queue
import sys
import threading
import time

from swarm.core.errors import TransportError
from swarm.p2p.libp2p import Libp2pTransport, TransportSettings
from tests.integration.libp2p_peer import emit, read_commands


def handle(transport: Libp2pTransport, topic: str, seen: list[bytes], cmd: dict) -> dict:
    name = cmd["cmd"]
    if name == "wait_mesh":
        return {
            "mesh": transport.wait_for_topic_peers(topic, cmd["n"], cmd.get("timeout", 30.0))
            >= cmd["n"]
        }
    if name == "publish":
        for data in cmd["hex"]:
            transport.publish(topic, bytes.fromhex(data))
        transport.flush()  # every attack is on the wire before the test starts waiting
        return {"published": len(cmd["hex"])}
    if name == "received":
        seen += [m.data for m in transport.receive()]
        return {"messages": [m.hex() for m in seen]}
    raise ValueError(f"unknown command {name!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--identity", required=True)
    parser.add_argument("--bootstrap", action="append", default=[])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--max-lifetime", type=float, default=120.0)
    args = parser.parse_args()

    settings = TransportSettings(
        listen_addr="/ip4/127.0.0.1/tcp/0", bootstrap=tuple(args.bootstrap)
    )
    transport = Libp2pTransport(settings, identity_path=args.identity)
    transport.start()
    transport.subscribe(args.topic, None)  # a hostile node checks nothing
    emit({"event": "ready", "peer_id": transport.peer_id})
    commands: queue.Queue = queue.Queue()
    threading.Thread(target=read_commands, args=(commands,), daemon=True).start()
    seen: list[bytes] = []
    deadline = time.monotonic() + args.max_lifetime
    try:
        while time.monotonic() < deadline:
            try:
                cmd = commands.get(timeout=0.5)
            except queue.Empty:
                continue
            if cmd is None or cmd["cmd"] == "exit":
                break
            try:
                reply = {
                    "id": cmd.get("id"),
                    "ok": True,
                    **handle(transport, args.topic, seen, cmd),
                }
            except (TransportError, ValueError, KeyError) as exc:
                reply = {"id": cmd.get("id"), "ok": False, "error": f"{type(exc).__name__}: {exc}"}
            emit(reply)
    finally:
        transport.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
