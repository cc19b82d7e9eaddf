"""Peers that vanish, stall or lie about others, in their own process, against a pull node
(for `tests/integration/test_unresponsive_peers.py` and `scripts/bench_unresponsive.py`).

Each mode starts real `Libp2pTransport`s on 127.0.0.1 that dial the node (`--bootstrap`),
fetch its announcement list and view (so the node hears of them as fetchers, as it hears of
any peer that asks it), and serve a view and an announcement list as a pull node does.
Then, by mode:

- `vanish`: `--count` such peers; the test stops this process (SIGSTOP): their TCP
  connections stay open and nothing answers, as when a machine sleeps or loses its network.
- `dead-view`: one peer serving a view of 64 made-up peers whose address drops SYNs (a
  listener on 127.0.0.1 whose backlog is full); the line `honest` on stdin makes it serve a
  view of itself alone.
- `silent-view`: one peer that takes every view request and never answers it.
- `stall-groups`: one network-only node announcing `--groups` groups; it takes every group
  fetch and never answers it.
- `old-lists`: one network-only node announcing `--groups` groups of policy version 0 (a
  node at version 2 or more, with `max_version_lag` 1, pulls none of them) and serving them.
- `wrong-bytes`: one network-only node announcing `--groups` groups and serving, under each
  group's key, other bytes of the announced size (the last byte changed).

Every peer keeps fetching the node's list and view every second (it is heard of anew).
Prints {"event": "ready", "peers": [...]} once each has fetched from the node; exits when
stdin closes or after --max-lifetime seconds, printing {"event": "served", "lists": n}: the
fetches of its list it served.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time

import trio

from swarm.core.errors import TransportError
from swarm.core.identity import create_identity, peer_id_of
from swarm.p2p.libp2p import Libp2pTransport, TransportSettings
from swarm.p2p.libp2p import blobs as blob_module
from swarm.p2p.libp2p.framing import read_frame
from swarm.wire import ANNOUNCEMENTS_KEY, group_key, pack_announcements
from swarm.wire.streams import VIEW_KEY, ViewEntry, encode_view

LISTEN = "/ip4/127.0.0.1/tcp/0"


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


STALLED: list[str] = []  # key prefixes this process takes and never answers


def stall_keys(prefixes: list[str]) -> None:
    """Make this process's blob servers take requests for `prefixes` and never answer."""
    STALLED.extend(prefixes)

    async def serve(self, stream, peer_id):
        key = (await read_frame(stream, blob_module.MAX_BLOB_KEY)).decode("utf-8")
        if any(key.startswith(p) for p in STALLED):
            await trio.sleep_forever()  # cancelled when the host stops
        with self._lock:
            data = self._blobs.get(key)
        header = blob_module.blob_response_header(
            blob_module.BlobStatus.OK if data is not None else blob_module.BlobStatus.MISSING,
            len(data or b""),
        )
        await blob_module._write_chunked(stream, header, data or b"")
        await blob_module.close_quietly(stream)

    blob_module.BlobServer._serve = serve  # type: ignore[method-assign]


def blackhole() -> tuple[socket.socket, list[socket.socket], int]:
    """A listener on 127.0.0.1 that never accepts, its backlog full: SYNs to it are dropped."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.socket()
    filler.connect(("127.0.0.1", port))
    return listener, [filler], port


def serve_wrong_bytes(t: Libp2pTransport) -> None:
    """Make `t` serve, under every group's key, other bytes of the same size."""
    serve = t.serve_blob
    prefix = group_key("")

    def wrong(key: str, data: bytes) -> None:
        if key.startswith(prefix) and data:
            data = data[:-1] + bytes([data[-1] ^ 1])
        serve(key, data)

    t.serve_blob = wrong  # type: ignore[method-assign]


def own_entry(t: Libp2pTransport) -> ViewEntry:
    return ViewEntry(t.peer_id, tuple(a.rsplit("/p2p/", 1)[0] for a in t.listen_addrs()), 0)


def fetch_patiently(t: Libp2pTransport, node: str, key: str, within_s: float = 120.0) -> None:
    deadline = time.monotonic() + within_s
    while True:
        try:
            t.fetch_blob(node, key, 10.0)
            return
        except TransportError as exc:
            print(f"fetching {key} from the node: {exc}", file=sys.stderr)
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def keep_asking(peers: list[Libp2pTransport], node: str, stop: threading.Event) -> None:
    """Fetch the node's list and view every second: heard of anew, as a live peer is."""
    while not stop.wait(1.0):
        for t in peers:
            for key in (ANNOUNCEMENTS_KEY, VIEW_KEY):
                try:
                    t.fetch_blob(node, key, 2.0)
                except TransportError:
                    pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--groups", type=int, default=256)
    parser.add_argument("--max-lifetime", type=float, default=120.0)
    args = parser.parse_args()
    node = args.bootstrap.rsplit("/p2p/", 1)[1]
    hole = None
    if args.mode == "silent-view":
        stall_keys([VIEW_KEY])
    if args.mode == "stall-groups":
        stall_keys(["pull/group/"])
    peers: list[Libp2pTransport] = []
    member = None
    members = ("stall-groups", "old-lists", "wrong-bytes")
    if args.mode in members:
        from lab.network_node import (
            ExchangeKind,
            NetworkNode,
            NetworkNodeSettings,
            RoundCost,
        )

        settings = NetworkNodeSettings(exchange=ExchangeKind.PULL, groups_per_round=args.groups)
        member = NetworkNode.over_libp2p(settings, listen=LISTEN, bootstrap=[args.bootstrap])
        member.start()
        if args.mode == "wrong-bytes":
            serve_wrong_bytes(member.transport)  # type: ignore[arg-type]
        member.publish_round(RoundCost(round=0))
        peers.append(member.transport)  # type: ignore[arg-type]
    else:
        for _ in range(args.count):
            t = Libp2pTransport(
                TransportSettings(listen_addr=LISTEN, bootstrap=(args.bootstrap,)),
                key_pair=create_identity(),
            )
            t.start()
            t.serve_blob(ANNOUNCEMENTS_KEY, pack_announcements([]))
            peers.append(t)
    entries = [own_entry(t) for t in peers]
    if args.mode == "dead-view":
        hole = blackhole()
        dead = f"/ip4/127.0.0.1/tcp/{hole[2]}"
        made_up = [ViewEntry(peer_id_of(create_identity()), (dead,), 0) for _ in range(64)]
        peers[0].serve_blob(VIEW_KEY, encode_view([entries[0], *made_up]))
    elif args.mode not in members:
        for t, entry in zip(peers, entries, strict=True):
            t.serve_blob(VIEW_KEY, encode_view([entry]))
    for t in peers:  # the node hears of each as a fetcher (a busy node may be slow to answer)
        for key in (ANNOUNCEMENTS_KEY, VIEW_KEY):
            fetch_patiently(t, node, key)
    stop = threading.Event()
    asker = threading.Thread(target=keep_asking, args=(peers, node, stop), daemon=True)
    asker.start()
    peers[0].served_blobs(ANNOUNCEMENTS_KEY)  # counted from now on
    emit({"event": "ready", "peers": [t.peer_id for t in peers]})
    closed = threading.Event()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "honest" and args.mode == "dead-view":
                peers[0].serve_blob(VIEW_KEY, encode_view([entries[0]]))
                emit({"event": "honest"})
        closed.set()

    threading.Thread(target=read_stdin, daemon=True).start()
    closed.wait(args.max_lifetime)
    stop.set()
    emit({"event": "served", "lists": len(peers[0].served_blobs(ANNOUNCEMENTS_KEY))})
    if member is not None:
        member.close()
    else:
        for t in peers:
            t.close()
    del hole
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
