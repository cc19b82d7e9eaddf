"""What the transport refuses from peers: counted always, reported to the node's hook, summarised.

Every refusal (an oversize or unsigned message, a control flood, a blob fetch over the
per-peer limit, ...) is counted in `Libp2pStats.peer_refusals` by reason and handed to
the refusal hook the node set (`Transport.set_refusal_hook`) as a `Refusal`.
A flood must not become a flood of ledger rows, so each (peer, reason) is reported at
most once per REPORT_INTERVAL_S; the events in between are summed into the next report's
`count`, and `flush()` (called every second from the network thread) sends what waited.

Pure apart from the clock, which is injected; used on the network thread only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from swarm.p2p.libp2p.stats import Counters
from swarm.p2p.transport import Refusal, RefusalHook, RefusalReason

logger = logging.getLogger(__name__)

REPORT_INTERVAL_S = 1.0
MAX_TRACKED = 4096  # (peer, reason) pairs remembered; beyond it the oldest are reported early


@dataclass
class _Pending:
    last_report: float
    count: int = 0
    latest: Refusal | None = None


class RefusalRecorder:
    """Counts refusals and reports them to the hook, at most once per second per (peer, reason)."""

    def __init__(self, counters: Counters, clock: Callable[[], float] = time.monotonic) -> None:
        self._counters = counters
        self._clock = clock
        self._hook: RefusalHook | None = None
        self._pending: dict[tuple[str, RefusalReason], _Pending] = {}

    def set_hook(self, hook: RefusalHook | None) -> None:
        self._hook = hook

    def note(
        self,
        peer_id: str,
        reason: RefusalReason,
        detail: str = "",
        *,
        source: str = "",
        topic: str = "",
        at_once: bool = False,
    ) -> None:
        """One refusal from `peer_id`: counted now, reported now or with the next summary
        (`at_once`: reported now whatever, on its own; for rare events such as a ban)."""
        with self._counters.locked() as stats:
            stats.peer_refusals[reason.value] += 1
        now = self._clock()
        refusal = Refusal(peer_id, reason, detail, 1, source, topic)
        if at_once:
            self._report(refusal)
            return
        key = (peer_id, reason)
        pending = self._pending.get(key)
        if pending is None or now - pending.last_report >= REPORT_INTERVAL_S:
            if pending is not None and pending.count:
                refusal = _summed(refusal, pending.count + 1)
            if len(self._pending) >= MAX_TRACKED and key not in self._pending:
                self._evict_oldest()
            self._pending[key] = _Pending(last_report=now)
            self._report(refusal)
            return
        pending.count += 1
        pending.latest = refusal

    def flush(self) -> None:
        """Report every summary whose interval has passed, and forget quiet pairs."""
        now = self._clock()
        for key, pending in list(self._pending.items()):
            if now - pending.last_report < REPORT_INTERVAL_S:
                continue
            if pending.count and pending.latest is not None:
                self._report(_summed(pending.latest, pending.count))
                self._pending[key] = _Pending(last_report=now)
            else:
                del self._pending[key]

    def _evict_oldest(self) -> None:
        key = min(self._pending, key=lambda k: self._pending[k].last_report)
        pending = self._pending.pop(key)
        if pending.count and pending.latest is not None:
            self._report(_summed(pending.latest, pending.count))

    def _report(self, refusal: Refusal) -> None:
        hook = self._hook
        if hook is None:
            return
        try:
            hook(refusal)
        except Exception as exc:  # noqa: BLE001 - the node's hook must never stop the host
            self._counters.handler_error("refusal_hook", exc)


def _summed(refusal: Refusal, count: int) -> Refusal:
    return Refusal(
        refusal.peer_id,
        refusal.reason,
        refusal.detail,
        count,
        refusal.source,
        refusal.topic,
    )
