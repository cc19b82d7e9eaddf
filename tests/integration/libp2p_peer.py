"""One `Libp2pTransport` node in its own process, driven over stdin/stdout with JSON lines.

Used by tests/integration/test_libp2p_transport.py to run several real nodes as separate
processes on 127.0.0.1. It is a test harness, not a node: it publishes what it is told to,
and records what it receives (by content) so the test can count deliveries.

Start:   python libp2p_peer.py --identity KEY [--listen ADDR] [--bootstrap ADDR ...]
                                [--topic T] [--validator none|raise-on-bad]
Prints:  {"event": "ready", "peer_id": ..., "addrs": [...]} once listening.
Then reads one JSON command per line on stdin and answers each with one JSON line
carrying the same "id". Commands:
    {"cmd": "wait_mesh", "n": 2, "timeout": 10}
    {"cmd": "publish", "prefix": "A", "count": 200, "start": 0, "size": 64}
    {"cmd": "publish_oversized"}
    {"cmd": "received"}                       -> {"counts": {prefix: n distinct}, "dupes": n}
    {"cmd": "stats"} / {"cmd": "peers"}
    {"cmd": "serve_blob", "key": k, "size": n, "seed": s}   -> {"sha256": ...}
    {"cmd": "fetch_blob", "peer": id, "key": k, "timeout": t} -> {"sha256": ..., "size": n}
    {"cmd": "exit"}
The process exits by itself when stdin closes (its parent died) or after --max-lifetime s.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import queue
import random
import sys
import threading
import time

from swarm.core.errors import TransportError
from swarm.p2p.libp2p import MAX_MESSAGE_SIZE, Libp2pTransport, TransportSettings
from swarm.p2p.transport import InboundMessage


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def raise_on_bad(message: InboundMessage) -> str | None:
    """A validator that *raises* (instead of returning a reason) on payloads starting b'bad'."""
    if message.data.startswith(b"bad"):
        raise ValueError("deliberately broken validator")
    return None


class Recorder:
    """Drains the transport continuously and remembers which (prefix, index) arrived."""

    def __init__(self, transport: Libp2pTransport) -> None:
        self._transport = transport
        self._lock = threading.Lock()
        self._seen: dict[str, set[int]] = collections.defaultdict(set)
        self._dupes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._transport.receive(timeout=0.1):
                self._record(message.data)

    def _record(self, data: bytes) -> None:
        prefix, _, rest = data.partition(b":")
        index = rest.partition(b":")[0]
        with self._lock:
            indices = self._seen[prefix.decode(errors="replace")]
            number = int(index) if index.isdigit() else -1
            if number in indices:
                self._dupes += 1
            indices.add(number)

    def counts(self) -> dict:
        with self._lock:
            return {"counts": {p: len(s) for p, s in self._seen.items()}, "dupes": self._dupes}

    def stop(self) -> None:
        self._stop.set()


def blob_bytes(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def handle(transport: Libp2pTransport, recorder: Recorder, topic: str, cmd: dict) -> dict:
    name = cmd["cmd"]
    if name == "wait_mesh":
        return {"mesh": transport.wait_for_topic_peers(topic, cmd["n"], cmd.get("timeout", 10.0))}
    if name == "publish":
        start, size = cmd.get("start", 0), cmd.get("size", 64)
        began = time.monotonic()
        for i in range(start, start + cmd["count"]):
            head = f"{cmd['prefix']}:{i}:".encode()
            transport.publish(topic, head + b"x" * max(0, size - len(head)))
        return {"published": cmd["count"], "seconds": time.monotonic() - began}
    if name == "publish_oversized":
        try:
            transport.publish(topic, b"x" * (MAX_MESSAGE_SIZE + 1))
        except TransportError as exc:
            return {"raised": type(exc).__name__, "message": str(exc)}
        return {"raised": None}
    if name == "received":
        return recorder.counts()
    if name == "stats":
        return {"stats": transport.stats().as_dict()}
    if name == "peers":
        return {"peers": [p.peer_id for p in transport.peers()]}
    if name == "serve_blob":
        data = blob_bytes(cmd["size"], cmd["seed"])
        transport.serve_blob(cmd["key"], data)
        return {"sha256": hashlib.sha256(data).hexdigest()}
    if name == "fetch_blob":
        began = time.monotonic()
        data = transport.fetch_blob(cmd["peer"], cmd["key"], timeout=cmd.get("timeout", 30.0))
        return {
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
            "seconds": time.monotonic() - began,
        }
    raise ValueError(f"unknown command {name!r}")


def read_commands(commands: queue.Queue) -> None:
    for line in sys.stdin:
        if line.strip():
            commands.put(json.loads(line))
    commands.put(None)  # stdin closed: the parent is gone


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--identity", required=True)
    parser.add_argument("--listen", default="/ip4/127.0.0.1/tcp/0")
    parser.add_argument("--bootstrap", action="append", default=[])
    parser.add_argument("--topic", default="test")
    parser.add_argument("--validator", choices=["none", "raise-on-bad"], default="none")
    parser.add_argument("--max-lifetime", type=float, default=300.0)
    args = parser.parse_args()

    settings = TransportSettings(listen_addr=args.listen, bootstrap=tuple(args.bootstrap))
    transport = Libp2pTransport(settings, identity_path=args.identity)
    transport.start()
    transport.subscribe(args.topic, raise_on_bad if args.validator == "raise-on-bad" else None)
    recorder = Recorder(transport)
    ready = {"event": "ready", "peer_id": transport.peer_id, "addrs": transport.listen_addrs()}
    print(json.dumps(ready), file=sys.stderr, flush=True)  # for reading a failed test's logs
    emit(ready)

    commands: queue.Queue = queue.Queue()
    threading.Thread(target=read_commands, args=(commands,), daemon=True).start()
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
                    **handle(transport, recorder, args.topic, cmd),
                }
            except (TransportError, ValueError, KeyError) as exc:
                reply = {"id": cmd.get("id"), "ok": False, "error": f"{type(exc).__name__}: {exc}"}
            emit(reply)
    finally:
        recorder.stop()
        transport.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
