"""The victim of the transport-level attacks: one honest `Libp2pTransport` in its own process.

Its own process, so that its memory (RSS) is its own and an attack that pins memory shows.
It accepts every message on the topic (the attacks here are below the node's validator),
records every `Refusal` its refusal hook receives, and answers JSON commands
like tests/integration/libp2p_peer.py, plus:
    {"cmd": "stats"}     -> {"stats": {...}, "rss_mb": float, "refusals": [...]} (all so far)
    {"cmd": "publish", ...}, {"cmd": "received"}, {"cmd": "serve_blob", ...}, {"cmd": "peers"}
It exits when stdin closes or after --max-lifetime seconds.
"""

from __future__ import annotations

import argparse
import os
import queue
import socket
import struct
import threading
import time

from swarm.core.errors import TransportError
from swarm.p2p.libp2p import Libp2pTransport, TransportSettings
from swarm.p2p.transport import Refusal
from tests.integration.libp2p_peer import Recorder, emit, handle, read_commands


def bytes_written() -> int:
    """TCP bytes this process has sent (acknowledged by peers), over all its open sockets.

    What an amplification attack costs the victim; read from each socket's TCP_INFO
    (tcpi_bytes_acked, at byte 120), so it counts exactly what went on the wire.
    """
    total = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(fd)))
        except OSError:
            continue
        try:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
                info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
                if len(info) >= 128:
                    total += struct.unpack_from("Q", info, 120)[0]
        except OSError:
            pass
        finally:
            sock.close()
    return total


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class Refusals:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: list[dict] = []

    def hook(self, refusal: Refusal) -> None:
        with self._lock:
            if len(self.items) < 10_000:
                self.items.append(
                    {
                        "peer": refusal.peer_id,
                        "reason": refusal.reason.value,
                        "count": refusal.count,
                        "detail": refusal.detail,
                        "source": refusal.source,
                    }
                )

    def all(self) -> list[dict]:
        with self._lock:
            return list(self.items)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topic", default="test")
    parser.add_argument("--max-lifetime", type=float, default=180.0)
    args = parser.parse_args()

    transport = Libp2pTransport(TransportSettings(listen_addr="/ip4/127.0.0.1/tcp/0"))
    refusals = Refusals()
    transport.set_refusal_hook(refusals.hook)
    transport.start()
    transport.subscribe(args.topic, None)
    recorder = Recorder(transport)
    emit({"event": "ready", "peer_id": transport.peer_id, "addrs": transport.listen_addrs()})
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
                if cmd["cmd"] == "stats":
                    body = {
                        "stats": transport.stats().as_dict(),
                        "rss_mb": rss_mb(),
                        "bytes_written": bytes_written(),
                        "refusals": refusals.all(),
                        "scores": transport.peer_scores(),
                        "costs": transport.peer_costs(),
                    }
                else:
                    body = handle(transport, recorder, args.topic, cmd)
                emit({"id": cmd.get("id"), "ok": True, **body})
            except (TransportError, ValueError, KeyError) as exc:
                emit({"id": cmd.get("id"), "ok": False, "error": f"{type(exc).__name__}: {exc}"})
    finally:
        recorder.stop()
        transport.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
