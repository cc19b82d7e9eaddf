"""A generator's side of following: keep a bf16 weight set in step with one trainer.

`DeltaFollower` takes the followed trainer's signed manifests from gossip (a cheap
validator on the transport's thread, then `offer` on the node's) and from the trainer's
index blob, and `sync()` fetches and applies what they announce. Every rule it applies is
in `swarm.sync.rules`; what this part adds is the order and the bounds:

- a payload is fetched under a deadline (the rest of the round's budget, at most
  `fetch_timeout`) and a rate floor (`min_rate` after `grace_s`), and its size and header
  are checked as it arrives (`PayloadCheck`), before the rest is read;
- a failed fetch is retried with exponential back-off per version step and provider, and
  the plan is made again without it, so an unservable version gives way to the next
  usable one within the same round;
- applying refuses NaN and infinite values and rolls back on any failure; a `load`
  callback given to `sync` can still refuse the result (the model's forward pass), and the
  step is then undone;
- a payload whose content failed is never fetched again, and `SyncResult.refused` lists it
  for the node to remember across restarts;
- refusals of gossip are events at most once per peer and reason per minute
  (`RejectionLimiter`); the rest are counted.

The parts: `manifest_inbox.ManifestInbox` (the gossip side, the known manifests and the
refused payloads), `payloads.PayloadFetcher` (holders first, then the trainer) and
`payloads.apply_payload`. The follower never touches the ledger or the model itself: the node records its events and
loads the changed tensors through `load`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from swarm.core.errors import RejectedMessage, TransportError
from swarm.core.reasons import Direction, Reason, Status
from swarm.p2p.transport import FetchLimits, InboundMessage, Transport
from swarm.sync.holders import HeldPayloads, read_hints
from swarm.sync.manifest_inbox import ManifestInbox, rejected_event, unreadable_event
from swarm.sync.payloads import PayloadFetcher, apply_payload
from swarm.sync.rules import (
    Backoff,
    DeltaEvent,
    Expectation,
    IndexCheck,
    RejectionLimiter,
    manifest_event,
    manifest_key,
    plan_catch_up,
)
from swarm.wire import DeltaManifest, delta_topic, index_key

INDEX_POLL_S = 10.0  # a follower re-reads the trainer's index at least this often (lost gossip)
MIN_FETCH_RATE = 128 * 1024  # bytes/s a fetch must average once its grace is over
FETCH_GRACE_S = 5.0
INDEX_TIMEOUT_S = 30.0
# Refusals that depend on the payload's bytes alone, found once they were verified against
# the signed hash: the same payload fails the same way after a restart, so it is remembered.
LASTING = frozenset(
    {
        Reason.UNDECODABLE,
        Reason.MANIFEST_MISMATCH,
        Reason.WRONG_TENSORS,
        Reason.NON_FINITE,
        Reason.APPLY_FAILED,
        Reason.BROKEN_MODEL,
    }
)

# Loads the named tensors of the follower's weights into the model and says what is wrong
# with the model then (None: nothing).
Load = Callable[[set[str]], str | None]


@dataclass
class SyncResult:
    """What one `DeltaFollower.sync` did."""

    version: int
    changed: set[str] = field(default_factory=set)  # tensor names whose bits changed
    events: list[DeltaEvent] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # payload hashes to remember for good


class DeltaFollower:
    """Generator side: keeps a bf16 weight set in step with one trainer, bit for bit.

    `weights` are the follower's bf16 tensors (updated in place). Gossip manifests arrive
    through `validator` (cheap checks on the transport's thread) and `offer` (on the node's
    thread); `sync()` fetches and applies what they announce, reading the trainer's index
    when it must catch up, for at most `budget_s` (default: `fetch_timeout`) of fetching.
    `refused`: payload hashes never to fetch (remembered from an earlier run).
    """

    def __init__(
        self,
        transport: Transport,
        expect: Expectation,
        weights: dict[str, torch.Tensor],
        version: int = 0,
        *,
        fetch_timeout: float = 120.0,
        budget_s: float | None = None,
        min_rate: float = MIN_FETCH_RATE,
        grace_s: float = FETCH_GRACE_S,
        threads: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        refused: Iterable[str] = (),
        hold: int = 0,
    ) -> None:
        self._transport = transport
        self.expect = expect
        self.weights = weights
        self.version = version
        self.fetch_timeout = fetch_timeout
        self.budget_s = fetch_timeout if budget_s is None else budget_s
        self.min_rate = min_rate
        self.grace_s = grace_s
        self.threads = threads
        self.clock = clock
        self.topic = delta_topic(expect.swarm_id)
        self.inbox = ManifestInbox(expect, clock)
        self.inbox.refuse(refused)
        self._last_index = -float("inf")
        self.backoff = Backoff()
        self.index_failures = 0  # index reads that failed (trainer not serving yet, or unreachable)
        self.budget_spent = 0  # syncs that stopped with steps left because the budget ran out
        # Deltas from any holder (`swarm.sync.holders`): with `hold`, this follower
        # serves its last `hold` deltas and fetches from other holders before the trainer.
        self.held = HeldPayloads(transport, expect.provider, hold) if hold > 0 else None
        self.fetcher = PayloadFetcher(
            transport,
            {name: tuple(t.shape) for name, t in weights.items()},
            self.backoff,
            random.Random(f"holders:{expect.provider}:{id(self)}"),
            fetch_timeout=fetch_timeout,
            min_rate=min_rate,
            grace_s=grace_s,
            clock=clock,
        )

    @property
    def transport(self) -> Transport:
        """The transport manifests and payloads are fetched through."""
        return self._transport

    @transport.setter
    def transport(self, transport: Transport) -> None:
        self._transport = self.fetcher.transport = transport

    @property
    def limiter(self) -> RejectionLimiter:
        """How many refusals of gossip were counted without an event, by peer and reason."""
        return self.inbox.limiter

    @property
    def dropped(self) -> int:
        """Gossip items lost to the bound on what waits for the node's thread."""
        return self.inbox.dropped

    @property
    def from_holders(self) -> int:
        """Payloads fetched from a holder rather than the trainer."""
        return self.fetcher.from_holders

    def refuse(self, payload_hashes: Iterable[str]) -> None:
        """Never fetch these payloads (by the blake3 hash their manifests sign)."""
        self.inbox.refuse(payload_hashes)

    def validator(self, message: InboundMessage) -> str | None:
        """Gossip validator: envelope and signatures only (stateless, cheap); refusals are noted."""
        return self.inbox.validator(message)

    def offer(self, message: InboundMessage) -> None:
        """A delta-topic message that passed the validator, handed over on the node's thread."""
        self.inbox.offer(message)

    # -- catching up -------------------------------------------------------------------------

    def sync(self, load: Load | None = None) -> SyncResult:
        """Fetch and apply everything newer that the followed trainer serves, within the
        budget; never raises for a peer's bad data (refusals are events). A step that fails
        is backed off and the plan is made again without it."""
        result = SyncResult(self.version)
        deadline = self.clock() + self.budget_s
        self.inbox.take(self.version, result.events)
        if self._index_due():
            self._read_index(result.events, deadline)
        if self.held is not None and self._plan():
            self.fetcher.hints = read_hints(
                self.transport,
                self.expect.provider,
                self.expect.base_hash,
                timeout=min(INDEX_TIMEOUT_S, max(0.1, deadline - self.clock())),
            )
        while plan := self._plan():
            if self.clock() >= deadline:
                self.budget_spent += 1
                break
            self._step(plan[0], result, deadline, load)
        self._forget_passed()
        result.version = self.version
        return result

    def _plan(self) -> list[DeltaManifest]:
        return plan_catch_up(self.version, self.inbox.usable(self.backoff))

    def _index_due(self) -> bool:
        now = self.clock()
        if not self.backoff.ready(("index", self.expect.provider), now):
            return False
        if now - self._last_index >= INDEX_POLL_S:
            return True
        # Something newer is known but not reachable from here: the steps between are missing.
        usable = self.inbox.usable(self.backoff)
        return any(m.to_version > self.version for m in usable) and not self._plan()

    def _forget_passed(self) -> None:
        self.inbox.forget_passed(self.version)
        self.backoff.forget(
            k
            for k in self.backoff.keys()
            if isinstance(k, tuple) and isinstance(k[-1], int) and k[-1] <= self.version
        )

    def _read_index(self, events: list[DeltaEvent], deadline: float) -> None:
        self._last_index = self.clock()
        key = ("index", self.expect.provider)
        timeout = min(INDEX_TIMEOUT_S, self.fetch_timeout, max(0.1, deadline - self.clock()))
        try:
            data = self.transport.fetch_blob(
                self.expect.provider,
                index_key(self.expect.base_hash),
                timeout=timeout,
                limits=FetchLimits(self.min_rate, self.grace_s, IndexCheck()),
            )
        except RejectedMessage as e:  # announced larger than any index
            self.backoff.failed(key, self.clock())
            self.inbox.limited(unreadable_event(self.expect.provider, 0, e), events)
            return
        except TransportError:
            # Not serving yet, or unreachable: no bad data to record; ask less often.
            self.index_failures += 1
            self.backoff.failed(key, self.clock())
            return
        self.backoff.succeeded(key)
        self.inbox.admit(data, None, self.version, events)

    def _step(self, m: DeltaManifest, result: SyncResult, deadline: float, load: Load | None):
        t0 = time.perf_counter()
        try:
            blob = self.fetcher.fetch(m, result.events, deadline)
        except RejectedMessage as e:  # its size or header, before the rest was read
            self._refuse(m, e.reason, e.detail, result, lasting=False)
            return
        if blob is None:
            return
        try:
            applied, undo = apply_payload(self.weights, self.version, m, blob, self.threads)
        except RejectedMessage as e:
            self._refuse(m, e.reason, e.detail, result, lasting=e.reason in LASTING)
            return
        names = {t.name for t in applied.tensors if t.count or m.kind == "anchor"}
        names |= {t.name for t in applied.tensors if t.alias_of in names}
        problem = load(names) if load is not None else None
        if load is not None and problem is not None:
            undo()
            load(names)  # the model gets the weights back
            self._refuse(m, Reason.BROKEN_MODEL, problem, result, lasting=True)
            return
        self.version = m.to_version
        self.backoff.succeeded(manifest_key(m))
        if self.held is not None and m.kind == "delta":
            self.held.hold(m.payload_hash, blob)
        result.changed |= names
        seconds = time.perf_counter() - t0
        result.events.append(
            manifest_event(m, Direction.RECEIVED, Status.APPLIED, nbytes=len(blob), seconds=seconds)
        )

    def _refuse(
        self, m: DeltaManifest, reason: Reason, detail: str, result: SyncResult, *, lasting: bool
    ) -> None:
        """Never fetch this payload again (and, `lasting`, not after a restart either)."""
        result.events.append(rejected_event(m, reason, detail))
        self.refuse([m.payload_hash])
        if lasting:
            result.refused.append(m.payload_hash)
        self.inbox.known.pop(manifest_key(m), None)
