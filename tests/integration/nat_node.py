"""Libp2p transports in one process, driven over stdin/stdout with JSON lines: the NAT
test (test_nat.py) starts one such process in each network namespace it builds.

Start:   python nat_node.py SPEC_JSON LOG_PATH
         SPEC_JSON: {"name": {Libp2pTransport keyword arguments}, ...}, started in order.
Prints:  {"event": "ready", "nodes": {name: {"peer_id": ..., "addrs": [...]}}}.
Then one JSON command per line, each answered with one JSON line carrying its "id":
    {"cmd": "addrs", "node": n}                          -> {"addrs": [...]}
    {"cmd": "serve", "node": n, "key": k, "size": s}     -> {"sha256": ...}
    {"cmd": "learn", "node": n, "peer": id, "addrs": [...]}
    {"cmd": "fetch", "node": n, "peer": id, "key": k, "count": c}
                                                         -> {"sha256": ..., "seconds": [...]}
    {"cmd": "reachability", "node": n}                   -> {"verdict": ...}
    {"cmd": "connections", "node": n, "peer": id}        -> {"kinds": ["relayed", ...]}
    {"cmd": "peers", "node": n}                          -> {"peers": [...]}
    {"cmd": "stats", "node": n}                          -> {"stats": {...}}
    {"cmd": "exit"}
Errors come back as {"error": "..."}. The process exits when stdin closes (its parent
died), on "exit", or after MAX_LIFETIME_S.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
import time

from swarm.core.errors import TransportError
from swarm.p2p.libp2p import Libp2pTransport, TransportSettings

MAX_LIFETIME_S = 300.0


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def answer(nodes: dict[str, Libp2pTransport], blobs: dict[str, bytes], cmd: dict) -> dict:
    node = nodes.get(cmd.get("node", ""))
    kind = cmd["cmd"]
    if node is None:
        return {"error": f"no node {cmd.get('node')!r}"}
    if kind == "addrs":
        return {"addrs": node.listen_addrs()}
    if kind == "serve":
        blob = blobs.setdefault(cmd["key"], os.urandom(int(cmd["size"])))
        node.serve_blob(cmd["key"], blob)
        return {"sha256": hashlib.sha256(blob).hexdigest()}
    if kind == "learn":
        node.learn_peer(cmd["peer"], cmd["addrs"])
        return {}
    if kind == "fetch":
        seconds, digest = [], ""
        for _ in range(int(cmd.get("count", 1))):
            began = time.monotonic()
            data = node.fetch_blob(cmd["peer"], cmd["key"], timeout=float(cmd.get("timeout", 15)))
            seconds.append(time.monotonic() - began)
            digest = hashlib.sha256(data).hexdigest()
        return {"sha256": digest, "seconds": seconds}
    if kind == "reachability":
        return {"verdict": node.check_reachability(timeout=20).value}
    if kind == "connections":
        return {"kinds": node.connection_kinds(cmd["peer"])}
    if kind == "peers":
        return {"peers": [p.peer_id for p in node.peers()]}
    if kind == "stats":
        return {"stats": node.stats().as_dict()}
    return {"error": f"unknown command {kind!r}"}


def main() -> None:
    spec = json.loads(sys.argv[1])
    logging.basicConfig(
        filename=sys.argv[2],
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    library = logging.getLogger("libp2p")  # it logs to the terminal through its own handlers
    for handler in list(library.handlers):
        library.removeHandler(handler)
    library.addHandler(logging.getLogger().handlers[0])
    threading.Timer(MAX_LIFETIME_S, lambda: os._exit(3)).start()
    nodes: dict[str, Libp2pTransport] = {}
    blobs: dict[str, bytes] = {}
    try:
        for name, kwargs in spec.items():
            nodes[name] = Libp2pTransport(TransportSettings(**kwargs))
            nodes[name].start()
        emit(
            {
                "event": "ready",
                "nodes": {
                    n: {"peer_id": t.peer_id, "addrs": t.listen_addrs()} for n, t in nodes.items()
                },
            }
        )
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["cmd"] == "exit":
                break
            try:
                reply = answer(nodes, blobs, cmd)
            except TransportError as exc:
                reply = {"error": str(exc)}
            emit({"id": cmd.get("id"), **reply})
    finally:
        for transport in nodes.values():
            transport.close()
    os._exit(0)  # a timer thread must not keep the process alive


if __name__ == "__main__":
    main()
