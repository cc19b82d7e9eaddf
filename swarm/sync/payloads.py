"""Fetching a manifest's payload (`PayloadFetcher`) and applying it (`apply_payload`).

A payload is fetched from the holders the trainer's hints name first (`swarm.sync.holders`;
only their exact signed bytes are taken), then from the trainer itself, each under a
deadline and a rate floor, its size and header checked as it arrives (`PayloadCheck`). A
failed fetch from the trainer is backed off per version step; applying refuses NaN and
infinite values and leaves the weights bit-identical on any failure.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import blake3
import torch

from swarm.core.errors import FetchTooSlow, RejectedMessage, TransportError
from swarm.core.reasons import Reason
from swarm.p2p.transport import FetchLimits, Transport
from swarm.policy.delta import (
    DeltaError,
    LayoutMismatch,
    NonFiniteWeights,
    apply_delta_undoable,
    read_header,
)
from swarm.sync.holders import pick_holders
from swarm.sync.manifest_inbox import rejected_event
from swarm.sync.rules import Backoff, DeltaEvent, PayloadCheck, check_header, manifest_key
from swarm.wire import DeltaManifest, held_key


class PayloadFetcher:
    """Fetches payloads for one follower (node's thread)."""

    def __init__(
        self,
        transport: Transport,
        shapes: dict[str, tuple[int, ...]],
        backoff: Backoff,
        rng: random.Random,
        *,
        fetch_timeout: float,
        min_rate: float,
        grace_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.transport = transport
        self.shapes = shapes
        self.backoff = backoff
        self.rng = rng
        self.fetch_timeout = fetch_timeout
        self.min_rate = min_rate
        self.grace_s = grace_s
        self.clock = clock
        self.hints: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        self.from_holders = 0  # payloads fetched from a holder rather than the trainer

    def fetch(self, m: DeltaManifest, events: list[DeltaEvent], deadline: float) -> bytes | None:
        """The payload, or None when it failed (backed off, an event in `events`).

        Raises `RejectedMessage` when the trainer's payload was refused on arrival (its size
        or header, before the rest was read)."""
        hinted = self.hints.get(m.payload_hash, [])
        own_id = self.transport.peer_id if hinted else ""
        for holder, addrs in pick_holders(hinted, own_id, m.provider, self.rng):
            blob = self._from_holder(m, holder, addrs, events, deadline)
            if blob is not None:
                self.from_holders += 1
                return blob
        try:
            return self.transport.fetch_blob(
                m.provider, m.key, timeout=self._timeout(deadline), limits=self._limits(m)
            )
        except RejectedMessage:
            raise
        except TransportError as e:
            delay = self.backoff.failed(manifest_key(m), self.clock())
            reason = Reason.FETCH_TOO_SLOW if isinstance(e, FetchTooSlow) else Reason.FETCH_FAILED
            events.append(rejected_event(m, reason, f"{e} (next try in {delay:.0f} s)"))
        return None

    def _timeout(self, deadline: float) -> float:
        return max(0.1, min(self.fetch_timeout, deadline - self.clock()))

    def _limits(self, m: DeltaManifest) -> FetchLimits:
        return FetchLimits(self.min_rate, self.grace_s, PayloadCheck(m, self.shapes))

    def _from_holder(
        self,
        m: DeltaManifest,
        holder: str,
        addrs: tuple[str, ...],
        events: list[DeltaEvent],
        deadline: float,
    ) -> bytes | None:
        """The payload from a holder if it serves exactly the signed bytes; a holder that
        serves others is recorded (the payload itself is not held against anyone)."""
        if addrs:
            self.transport.learn_peer(holder, addrs)
        timeout, limits = self._timeout(deadline), self._limits(m)
        try:
            blob = self.transport.fetch_blob(holder, held_key(m.payload_hash), timeout, limits)
        except RejectedMessage as e:  # its size or header, before the rest was read
            events.append(rejected_event(m, e.reason, f"from holder: {e.detail}", holder))
            return None
        except TransportError:
            return None  # gone, or no longer holding it: a hint, not a promise
        if len(blob) != m.size or blake3.blake3(blob).hexdigest() != m.payload_hash:
            detail = "a holder served bytes that are not the signed payload"
            events.append(rejected_event(m, Reason.BAD_HASH, detail, holder))
            return None
        return blob


def apply_payload(
    weights: dict[str, torch.Tensor],
    version: int,
    m: DeltaManifest,
    blob: bytes,
    threads: int | None,
):
    """Check the whole payload against its manifest and apply it to `weights` (at
    `version`); `RejectedMessage` with the reason otherwise (the weights then bit-identical
    to before). Returns `apply_delta_undoable`'s (applied, undo)."""
    if len(blob) != m.size:
        raise RejectedMessage(Reason.BAD_SIZE, f"{len(blob)} bytes, manifest says {m.size}")
    if blake3.blake3(blob).hexdigest() != m.payload_hash:
        raise RejectedMessage(Reason.BAD_HASH, "payload hash differs from the signed manifest")
    try:
        info = read_header(blob)
    except DeltaError as e:
        raise RejectedMessage(Reason.UNDECODABLE, str(e)) from None
    check_header(m, info)
    try:
        # Applied in place with undo: a failed check leaves the weights bit-identical.
        return apply_delta_undoable(
            weights,
            blob,
            expect_from_version=version if m.kind == "delta" else None,
            threads=threads,
            finite=True,
        )
    except NonFiniteWeights as e:
        raise RejectedMessage(Reason.NON_FINITE, str(e)) from None
    except LayoutMismatch as e:
        raise RejectedMessage(Reason.WRONG_TENSORS, str(e)) from None
    except DeltaError as e:
        raise RejectedMessage(Reason.APPLY_FAILED, str(e)) from None
