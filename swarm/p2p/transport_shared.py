"""What every transport implementation shares: the validator runner (a validator never
raises), the bounded inbox, the log of blobs served, and a blob check over a whole blob.
"""

from __future__ import annotations

import collections
import threading

from swarm.p2p.transport_types import BlobCheck, BlobServed, InboundMessage, Validator


class ServedBlobLog:
    """Thread-safe record of blobs served, drained by whoever accounts for them.

    Bounded: a node that never drains it (nothing it serves is accounted) keeps the newest
    `capacity` entries and counts the rest in `dropped`.
    """

    def __init__(self, capacity: int = 4096):
        self._entries: collections.deque[BlobServed] = collections.deque(maxlen=capacity)
        self._lock = threading.Lock()
        self.dropped = 0

    def note(self, peer_id: str, key: str, nbytes: int, addrs: tuple[str, ...] = ()) -> None:
        with self._lock:
            if len(self._entries) == self._entries.maxlen:
                self.dropped += 1
            self._entries.append(BlobServed(peer_id, key, nbytes, addrs))

    def drain(self, prefix: str = "") -> list[BlobServed]:
        """The entries whose key starts with `prefix` (all by default); the others stay."""
        with self._lock:
            entries = [e for e in self._entries if e.key.startswith(prefix)]
            if prefix:
                kept = [e for e in self._entries if not e.key.startswith(prefix)]
                self._entries.clear()
                self._entries.extend(kept)
            else:
                self._entries.clear()
        return entries


def run_validator(validator: Validator | None, message: InboundMessage) -> str | None:
    """Run a validator so that it can never raise: an exception is the rejection 'validator_error'."""
    if validator is None:
        return None
    try:
        return validator(message)
    except Exception:  # noqa: BLE001 - by contract a validator error means "reject", never a crash
        return "validator_error"


class BoundedInbox:
    """A thread-safe FIFO that drops the *oldest* message when full and counts each drop."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("inbox capacity must be at least 1")
        self._items: collections.deque[InboundMessage] = collections.deque()
        self._capacity = capacity
        self._cond = threading.Condition()
        self.dropped = 0

    def put(self, message: InboundMessage) -> None:
        with self._cond:
            if len(self._items) >= self._capacity:
                self._items.popleft()
                self.dropped += 1
            self._items.append(message)
            self._cond.notify_all()

    def drain(self, max_messages: int | None = None, timeout: float = 0.0) -> list[InboundMessage]:
        """Take up to `max_messages` (all if None), waiting up to `timeout` s for the first one."""
        with self._cond:
            if not self._items and timeout > 0:
                self._cond.wait_for(lambda: bool(self._items), timeout=timeout)
            n = len(self._items) if max_messages is None else min(max_messages, len(self._items))
            return [self._items.popleft() for _ in range(n)]

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)


def run_blob_check(check: BlobCheck | None, data: bytes) -> None:
    """A `BlobCheck` over a blob already held whole (transports without streams)."""
    if check is None:
        return
    check.size(len(data))
    seen = 0
    while True:
        need = check.head(data[:seen])
        if need <= seen or seen >= len(data):
            return
        seen = min(need, len(data))
