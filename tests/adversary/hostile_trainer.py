"""A hostile trainer in its own process: a libp2p host that answers blob fetches as told.

It speaks the blob protocol (`/swarm/blob/1.0.0`) from the trainer's identity, and nothing
else (no gossip): a follower finds its signed manifests in the index blob. Each key is
served in one of these ways, read from a JSON plan `{key: {"mode": ..., "file": path}}`:

- `serve`: the file's bytes, as an honest trainer would;
- `drip`: the right length, then one byte every `--drip-interval` seconds;
- `lie`: a length of `announce` bytes, then zeros until that many are sent or the fetcher
  gives up (a 1.3 KB manifest answered with 1 GiB);
- any key not in the plan: "missing".

Start:  python -m tests.adversary.hostile_trainer --seed HEX --plan PATH
Prints: {"event": "ready", "peer_id": ..., "addrs": [...]}; then answers JSON lines:
    {"cmd": "sent"} -> {"sent": {key: bytes written}}  (blob bytes, headers excluded)
It exits when stdin closes or after --max-lifetime seconds.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

import trio
from libp2p.abc import INetStream

from swarm.core.identity import create_identity, peer_id_of
from swarm.p2p.libp2p.blobs import BLOB_PROTOCOL
from swarm.p2p.libp2p.framing import NET_ERRORS, close_quietly, read_frame, reset_quietly
from swarm.p2p.libp2p.host import build_host, parse_listen_addr
from swarm.p2p.libp2p.network_thread import NetworkThread
from swarm.wire.streams import MAX_BLOB_KEY_BYTES, BlobStatus, blob_response_header

CHUNK = 256 * 1024


class Server:
    def __init__(self, plan: dict, drip_interval: float) -> None:
        self.plan = plan
        self.drip_interval = drip_interval
        self.sent: dict[str, int] = {}
        self.lock = threading.Lock()  # `sent` is read from the main thread

    def on_flow_violation(self, peer_id) -> None:
        """Nothing: this host is the hostile one."""

    async def handle(self, stream: INetStream) -> None:
        try:
            key = (await read_frame(stream, MAX_BLOB_KEY_BYTES)).decode()
            how = self.plan.get(key)
            with self.lock:
                self.sent.setdefault(key, 0)
            if how is None:
                await stream.write(blob_response_header(BlobStatus.MISSING, 0))
            elif how["mode"] == "lie":
                await self._lie(stream, key, int(how["announce"]))
            else:
                data = Path(how["file"]).read_bytes()
                await stream.write(blob_response_header(BlobStatus.OK, len(data)))
                step = 1 if how["mode"] == "drip" else CHUNK
                for offset in range(0, len(data), step):
                    await stream.write(data[offset : offset + step])
                    self.sent[key] += len(data[offset : offset + step])
                    if how["mode"] == "drip":
                        await trio.sleep(self.drip_interval)
            await close_quietly(stream)
        except NET_ERRORS:
            await reset_quietly(stream)  # the fetcher gave up: what a bounded one does
        except Exception:  # noqa: BLE001 - a test server: report, keep serving
            await reset_quietly(stream)

    async def _lie(self, stream: INetStream, key: str, announce: int) -> None:
        await stream.write(blob_response_header(BlobStatus.OK, announce))
        zeros = bytes(CHUNK)
        while self.sent[key] < announce:
            part = zeros[: announce - self.sent[key]]
            await stream.write(part)
            self.sent[key] += len(part)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", required=True, help="32-byte identity seed, hex")
    parser.add_argument("--plan", required=True)
    parser.add_argument("--drip-interval", type=float, default=2.0)
    parser.add_argument("--max-lifetime", type=float, default=120.0)
    args = parser.parse_args()
    signal.alarm(int(args.max_lifetime))  # ends by itself whatever happens
    key_pair = create_identity(bytes.fromhex(args.seed))
    server = Server(json.loads(Path(args.plan).read_text()), args.drip_interval)
    thread = NetworkThread("hostile-trainer", "hostile trainer", grace=2.0)
    addrs: list[str] = []

    async def run() -> None:
        host = build_host(
            key_pair,
            parse_listen_addr("/ip4/127.0.0.1/tcp/0"),
            None,
            10.0,
            server.on_flow_violation,  # held by a weak reference: a bound method
        )
        host.set_stream_handler(BLOB_PROTOCOL, server.handle)
        async with host.run([parse_listen_addr("/ip4/127.0.0.1/tcp/0")]):
            addrs.extend(f"{a}/p2p/{peer_id_of(key_pair)}" for a in host.get_transport_addrs())
            thread.mark_ready()
            await thread.wait_for_stop()

    thread.start(run, 30.0)
    print(json.dumps({"event": "ready", "peer_id": peer_id_of(key_pair), "addrs": addrs}))
    sys.stdout.flush()
    try:
        for line in sys.stdin:
            if json.loads(line)["cmd"] != "sent":
                break
            with server.lock:
                sent = dict(server.sent)
            print(json.dumps({"sent": sent}), flush=True)
    finally:
        thread.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
