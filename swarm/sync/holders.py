"""Deltas from any holder: a trainer's upload per version stays about constant with its
followers.

Without holders, a trainer with 100 followers sends each delta 100 times. With them:

- a follower that applied a delta serves the payload as a *holder*, under
  `held_key(payload_hash)` (its last `hold` deltas), and tells the trainer so by fetching
  the one-byte blob `have_key(payload_hash)` the trainer serves for each payload;
- the trainer learns its holders from its served-blob record (the followers that fetched a
  payload from it in full, and those that said they have it) and serves hints of them,
  with their addresses, under `holders_key(base_hash)` (`HolderRegistry`);
- a follower reads those hints before fetching and tries up to `MAX_TRIES` holders, in
  random order, before the trainer itself.

Nothing from a holder is trusted: the trainer's signed manifest pins the payload's size
and blake3 hash, and a holder whose bytes differ is refused and recorded as the source of
a `bad_hash` (or of the check that caught it on arrival); the follower then tries the next
source, and the payload itself is not held against anyone. Bytes that match the hash are
the trainer's own, checked and applied exactly as if fetched from it.

Deliberately not here: fetching order within a sync, applying (`delta_follower`), or what
the trainer publishes (`delta_publisher`).
"""

from __future__ import annotations

import collections
import random
import threading
from collections.abc import Iterable
from typing import Annotated

import msgspec

from swarm.core.errors import RejectedMessage, TransportError
from swarm.core.reasons import Reason
from swarm.p2p.transport import BlobServed, FetchLimits, Transport
from swarm.wire import HolderHint, have_key, held_key, holders_key

MAX_HINTS_PER_PAYLOAD = 8  # newest holders a trainer names for one payload
MAX_HINT_PAYLOADS = 4  # its newest payloads (a follower further behind fetches from it)
MAX_TRIES = 3  # holders a follower tries for one payload before the trainer
# The most a trainer's hints can legitimately take: 32 hints of a 64-character hash, a peer ID
# and 4 addresses of at most 256 ASCII characters each, about 1.4 KB a hint (a real one is a
# few KB in all). A follower refuses a longer blob on its announced size, before reading it.
MAX_HINTS_BYTES = 64 * 1024
HAVE_PREFIX = have_key("")
_HINTS = msgspec.msgpack.Decoder(
    Annotated[list[HolderHint], msgspec.Meta(max_length=MAX_HINTS_PER_PAYLOAD * MAX_HINT_PAYLOADS)]
)


class HolderRegistry:
    """Trainer side: which followers hold which payloads, served as hints."""

    def __init__(self, transport: Transport, base_hash: str):
        self.transport = transport
        self.key = holders_key(base_hash)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # payload hash -> {holder: addrs}, newest last
        self._holders: collections.OrderedDict[str, dict[str, tuple[str, ...]]] = (
            collections.OrderedDict()
        )

    def note(self, fetches: Iterable[tuple[BlobServed, str]]) -> None:
        """(fetch, payload hash) pairs: a full fetch of a payload, or of its have-key."""
        fetches = list(fetches)
        if not fetches:
            return
        try:
            addrs = {p.peer_id: tuple(p.addrs) for p in self.transport.peers()}
        except TransportError:  # stopping: the hints are still worth serving to the end
            addrs = {}
        with self._lock:
            self._note(fetches, addrs)
            hints = self.hints()
        self.transport.serve_blob(self.key, encode_hints(hints))

    def _note(self, fetches: list[tuple[BlobServed, str]], addrs: dict) -> None:
        for fetch, payload_hash in fetches:
            known = self._holders.setdefault(payload_hash, {})
            known.pop(fetch.peer_id, None)
            known[fetch.peer_id] = addrs.get(fetch.peer_id, ())
            while len(known) > MAX_HINTS_PER_PAYLOAD:
                known.pop(next(iter(known)))
            self._holders.move_to_end(payload_hash)
        while len(self._holders) > MAX_HINT_PAYLOADS:
            self._holders.popitem(last=False)

    def refresh(self) -> None:
        """Take in the followers that said they hold a payload since the last call."""
        fetches = self.transport.served_blobs(HAVE_PREFIX)
        self.note((f, f.key[len(HAVE_PREFIX) :]) for f in fetches)

    def run_every(self, interval_s: float) -> threading.Thread:
        """`refresh` every `interval_s` on the thread "delta-holders", until `stop` (which
        joins it) or the transport closes: a trainer's rounds are long, and followers should
        find holders within seconds of each other's fetches, not a round later."""

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.refresh()
                except TransportError:
                    return  # the transport closed: the node is stopping

        self._thread = threading.Thread(target=loop, name="delta-holders", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float = 5.0) -> None:
        """End the refresh thread, if one runs, and wait for it (one refresh at most)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def hints(self) -> list[HolderHint]:
        return [
            HolderHint(payload_hash, peer, addrs[:4])
            for payload_hash, holders in self._holders.items()
            for peer, addrs in holders.items()
        ]

    def holders(self, payload_hash: str) -> list[str]:
        return list(self._holders.get(payload_hash, {}))


def encode_hints(hints: list[HolderHint]) -> bytes:
    return msgspec.msgpack.encode(hints)


def decode_hints(data: bytes) -> list[HolderHint]:
    """A trainer's holder hints; only hints, so a malformed list gives none."""
    try:
        return _HINTS.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return []


class HintsCheck:
    """Refuses a hints blob announced longer than `MAX_HINTS_BYTES` (a `BlobCheck`)."""

    def size(self, nbytes: int) -> None:
        if nbytes > MAX_HINTS_BYTES:
            raise RejectedMessage(
                Reason.OVERSIZE, f"holder hints of {nbytes} bytes (at most {MAX_HINTS_BYTES})"
            )

    def head(self, data: bytes) -> int:
        return 0


def read_hints(
    transport: Transport, provider: str, base_hash: str, timeout: float
) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """payload hash -> [(holder, addrs)] as the trainer serves them ({} if it serves none,
    or serves more than hints can be: refused before any of it is read)."""
    limits = FetchLimits(check=HintsCheck())
    try:
        data = transport.fetch_blob(provider, holders_key(base_hash), timeout, limits)
    except (TransportError, RejectedMessage):
        return {}
    out: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for hint in decode_hints(data):
        out.setdefault(hint.content_hash, []).append((hint.peer_id, tuple(hint.addrs)))
    return out


def pick_holders(
    hints: list[tuple[str, tuple[str, ...]]], own_id: str, provider: str, rng: random.Random
) -> list[tuple[str, tuple[str, ...]]]:
    """Up to `MAX_TRIES` hinted holders in random order (never ourselves or the trainer)."""
    usable = [(peer, addrs) for peer, addrs in hints if peer not in (own_id, provider)]
    rng.shuffle(usable)
    return usable[:MAX_TRIES]


class HeldPayloads:
    """Follower side: the last `keep` applied deltas, served to other followers."""

    def __init__(self, transport: Transport, provider: str, keep: int):
        self.transport = transport
        self.provider = provider
        self.keep = keep
        self._held: collections.deque[str] = collections.deque()
        self.reports_failed = 0

    def hold(self, payload_hash: str, blob: bytes) -> None:
        """Serve `blob` from now on and tell the trainer (a one-byte fetch)."""
        self.transport.serve_blob(held_key(payload_hash), blob)
        self._held.append(payload_hash)
        while len(self._held) > self.keep:
            self.transport.unserve_blob(held_key(self._held.popleft()))
        try:
            self.transport.fetch_blob(self.provider, have_key(payload_hash), timeout=5.0)
        except TransportError:
            self.reports_failed += 1  # the trainer may have rotated it out: nothing to say

    def held(self) -> list[str]:
        return list(self._held)
