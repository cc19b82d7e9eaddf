"""One gossip node of the gossip benchmark, in its own process, driven by JSON-lines commands
on stdin (wait_mesh, publish, flush, stats, count, report, exit), one JSON reply a line.

    python -m lab.gossip_worker --index 0 [--bootstrap ADDR ...] [--mesh-degree D]

`lab.gossip_driver` starts and drives it. A measurement tool, not a load generator for
real deployments.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from dataclasses import replace
from typing import Any

TOPIC = "bench"


def _emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class _Recorder:
    """Records, per phase, (sender, seq, latency ms, came-straight-from-origin) of each message."""

    def __init__(self, transport) -> None:
        self._transport = transport
        self._lock = threading.Lock()
        self.records: dict[str, list] = {}
        self.last_receive: dict[str, float] = {}
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._transport.receive(timeout=0.1):
                self._record(message)

    def _record(self, message) -> None:
        sender, seq, phase, sent_ns = message.data.split(b":", 4)[:4]
        latency_ms = (message.received_at - int(sent_ns) / 1e9) * 1000.0
        direct = getattr(message, "forwarder", "") == message.source
        with self._lock:
            self.records.setdefault(phase.decode(), []).append(
                [int(sender), int(seq), latency_ms, direct]
            )
            self.last_receive[phase.decode()] = max(
                self.last_receive.get(phase.decode(), 0.0), message.received_at
            )

    def count(self, phase: str) -> int:
        with self._lock:
            return len({(r[0], r[1]) for r in self.records.get(phase, [])})

    def report(self, phase: str) -> dict:
        with self._lock:
            return {
                "records": list(self.records.get(phase, [])),
                "last_receive": self.last_receive.get(phase, 0.0),
            }

    def stop(self) -> None:
        self._stop.set()


def _publish(transport, index: int, cmd: dict) -> dict:
    count, size, rate, phase = cmd["count"], cmd["size"], cmd["rate"], cmd["phase"]
    interval = 1.0 / rate if rate > 0 else 0.0
    began_wall, began = time.time(), time.monotonic()
    next_at = began
    for seq in range(count):
        if interval:
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            next_at += interval
        head = f"{index}:{seq}:{phase}:{time.time_ns()}:".encode()
        transport.publish(TOPIC, head + b"x" * max(0, size - len(head)))
    return {"began": began_wall, "seconds": time.monotonic() - began}


def worker_main(args: argparse.Namespace) -> int:
    """Start the node, say it is ready with its addresses, answer commands until exit."""
    from swarm.core.errors import TransportError
    from swarm.p2p.libp2p import Libp2pTransport, TransportSettings

    settings = TransportSettings(
        bootstrap=tuple(args.bootstrap), topics=(TOPIC,), inbox_capacity=1 << 18
    )
    if args.mesh_degree is not None:
        settings = replace(settings, mesh_degree=args.mesh_degree)
    transport = Libp2pTransport(settings)
    transport.start()
    recorder = _Recorder(transport)
    _emit({"event": "ready", "peer_id": transport.peer_id, "addrs": transport.listen_addrs()})
    commands: queue.Queue = queue.Queue()

    def read_stdin() -> None:
        for line in sys.stdin:
            commands.put(json.loads(line))
        commands.put({"cmd": "exit"})  # parent gone

    threading.Thread(target=read_stdin, daemon=True).start()
    deadline = time.monotonic() + args.max_lifetime
    try:
        while time.monotonic() < deadline:
            try:
                cmd = commands.get(timeout=0.5)
            except queue.Empty:
                continue
            name = cmd["cmd"]
            if name == "exit":
                break
            reply: dict[str, Any]
            try:
                if name == "wait_mesh":
                    reply = {
                        "mesh": transport.wait_for_topic_peers(TOPIC, cmd["n"], cmd["timeout"])
                    }
                elif name == "publish":
                    reply = _publish(transport, args.index, cmd)
                elif name == "flush":
                    reply = {"flushed": transport.flush(cmd["timeout"])}
                elif name == "stats":
                    reply = {"stats": transport.stats().as_dict()}
                elif name == "count":
                    reply = {"count": recorder.count(cmd["phase"])}
                elif name == "report":
                    reply = {**recorder.report(cmd["phase"]), "stats": transport.stats().as_dict()}
                else:
                    raise ValueError(f"unknown command {name!r}")
                reply["ok"] = True
            except (TransportError, ValueError, KeyError) as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            _emit({"id": cmd.get("id"), **reply})
    finally:
        recorder.stop()
        transport.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """The worker's own options (what the driver passes), then the node until exit."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=int, default=0, help="this node's number")
    parser.add_argument("--bootstrap", action="append", default=[], help="a peer's address")
    parser.add_argument("--max-lifetime", type=float, default=1800.0, help="seconds at most")
    parser.add_argument("--mesh-degree", type=int, default=None, help="GossipSub D")
    return worker_main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
