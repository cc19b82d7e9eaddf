"""Following a trainer's policy: the rules of publishing and applying sparse weight deltas.

A trainer with `sync.publish_deltas` runs a `DeltaPublisher` (`swarm.sync.publisher`):
after each update it encodes the change of its bf16 weights (`swarm.policy.delta`), serves
the payload over the blob stream protocol, and announces it on the swarm's delta topic in
a signed `DeltaManifest`, with an index blob of everything it serves.

A generator-role node runs a `DeltaFollower` (`swarm.sync.follower`) for one
configured trainer. Nothing from the trainer is trusted: a manifest must be validly signed
*by the followed peer*, name this swarm, this model and this base, and announce a size
within the limit; the served payload must announce the signed size (refused before any of
it is read), its header must list this model's tensors and agree with the manifest (refused
before the rest is read), and the whole payload must have the signed hash; applying checks
the base weights before and the result hash after, refuses NaN and infinite values, and
rolls back on any failure. A fetch is bounded in time and in rate, a failing one is retried
with exponential back-off, and the node's round never waits on fetches longer than its
budget.

This module holds the pure parts, plain functions and classes over plain data, each unit
tested without a network: the `DeltaEvent` the ledger records, `check_manifest`,
`plan_catch_up`, the `PayloadCheck` run on a payload's first bytes, `Backoff` and
`RejectionLimiter`. Deliberately not here: choosing whom to follow, or trusting a trainer's
training itself.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Direction, Reason, Status
from swarm.policy.delta import (
    PREFIX,
    DeltaError,
    DeltaInfo,
    LayoutMismatch,
    check_layout,
    header_extent,
    peek_header,
)
from swarm.policy.source import same_weights
from swarm.wire import MAX_MANIFEST_MESSAGE_BYTES, DeltaManifest

# A delta header takes ~200 bytes per tensor; a payload whose header claims more than this
# per tensor of the model (plus a margin) is refused before the header is read.
HEADER_BYTES_PER_TENSOR = 1024
HEADER_MARGIN = 64 * 1024


@dataclass(frozen=True)
class DeltaEvent:
    """One delta or anchor published, applied or refused: a row of the ledger's `deltas` table."""

    direction: Direction
    peer: str  # the other side: the provider for received ones, "" for published ones
    kind: str  # "delta" | "anchor"
    from_version: int  # -1 for an anchor (or when unknown)
    to_version: int  # -1 when unknown (a message that did not decode)
    nbytes: int
    seconds: float
    status: Status  # published, served (fetched in full by `peer`), applied or rejected
    reason: Reason | Literal[""] = ""  # why it was rejected ("" otherwise, as the ledger keeps it)
    detail: str = ""  # for logs; the ledger keeps the code


def manifest_event(
    m: DeltaManifest,
    direction: Direction,
    status: Status,
    *,
    peer: str | None = None,
    nbytes: int | None = None,
    seconds: float = 0.0,
    reason: Reason | Literal[""] = "",
    detail: str = "",
) -> DeltaEvent:
    """What was done with `m`'s payload, as a ledger row: the peer is its provider and the
    bytes its declared size unless given; the detail is cut to 500 characters."""
    return DeltaEvent(
        direction,
        m.provider if peer is None else peer,
        m.kind,
        m.from_version,
        m.to_version,
        m.size if nbytes is None else nbytes,
        seconds,
        status,
        reason,
        detail[:500],
    )


@dataclass(frozen=True)
class Expectation:
    """What a follower accepts: whose manifests, for which swarm, model and base."""

    provider: str
    swarm_id: str
    model: str
    base_hash: str
    max_bytes: int


def check_manifest(m: DeltaManifest, expect: Expectation, source: str | None = None) -> None:
    """Raise `RejectedMessage` unless a (signature-verified) manifest is one to act on.

    `source` is the peer the transport says published it (gossip), if known.
    """
    if m.provider != expect.provider:
        raise RejectedMessage(
            Reason.NOT_FOLLOWED,
            f"manifest by {m.provider[:16]}..., this node follows {expect.provider[:16]}...",
        )
    if source is not None and source != m.provider:
        raise RejectedMessage(
            Reason.SENDER_MISMATCH,
            f"published by {source[:16]}... for provider {m.provider[:16]}...",
        )
    if m.swarm_id != expect.swarm_id:
        raise RejectedMessage(Reason.WRONG_SWARM, f"manifest of swarm {m.swarm_id!r}")
    if not same_weights(m.model, m.base_hash, expect.model, expect.base_hash):
        raise RejectedMessage(
            Reason.WRONG_BASE,
            f"manifest for {m.model!r} base {m.base_hash[:12]}, "
            f"this node runs {expect.model!r} base {expect.base_hash[:12]}",
        )
    if m.size > expect.max_bytes:
        raise RejectedMessage(
            Reason.OVERSIZE, f"{m.kind} of {m.size} bytes exceeds the limit of {expect.max_bytes}"
        )


def plan_catch_up(version: int, manifests: Iterable[DeltaManifest]) -> list[DeltaManifest]:
    """The steps that bring weights at `version` to the newest reachable version.

    Either a chain of deltas starting at `version`, or the newest anchor followed by the
    chain of deltas after it; whichever ends at the higher version, and on a tie the one
    with fewer bytes. Empty when nothing newer is reachable. The caller leaves out what it
    cannot fetch now, so an unservable anchor gives way to the next usable path.
    """
    deltas: dict[int, DeltaManifest] = {}
    anchors: list[DeltaManifest] = []
    for m in manifests:
        if m.kind == "anchor":
            anchors.append(m)
        elif m.from_version not in deltas or m.to_version > deltas[m.from_version].to_version:
            deltas[m.from_version] = m  # of two deltas from one version, the longer jump

    def chain(start: int) -> list[DeltaManifest]:
        steps, at = [], start
        while at in deltas and deltas[at].to_version > at:
            steps.append(deltas[at])
            at = deltas[at].to_version
        return steps

    candidates = [chain(version)]
    if anchors:
        newest = max(anchors, key=lambda a: a.to_version)
        candidates.append([newest, *chain(newest.to_version)])

    def end(path: list[DeltaManifest]) -> int:
        return path[-1].to_version if path else version

    best = max(candidates, key=lambda p: (end(p), -sum(m.size for m in p)))
    return best if end(best) > version else []


def manifest_key(m: DeltaManifest) -> tuple[str, str, int, int]:
    """What a follower retries and backs off by: one provider's step between two versions."""
    return (m.provider, m.kind, m.from_version, m.to_version)


# --------------------------------------------------------------------------- payload check


class PayloadCheck:
    """Checks a payload's announced size and its header while it arrives (a `BlobCheck`).

    The announced length must be the signed size; the container header, read from the
    first bytes, must agree with the manifest and list exactly the follower's tensors with
    their shapes. Each failure is a `RejectedMessage` raised before the rest is read. These
    bytes are not verified yet (the signed hash covers the whole payload): this only
    refuses early; everything is checked again once the payload is whole.
    """

    def __init__(self, manifest: DeltaManifest, shapes: Mapping[str, Sequence[int]]) -> None:
        self.manifest = manifest
        self.shapes = shapes
        self.max_header = HEADER_BYTES_PER_TENSOR * len(shapes) + HEADER_MARGIN

    def size(self, nbytes: int) -> None:
        if nbytes != self.manifest.size:
            raise RejectedMessage(
                Reason.BAD_SIZE,
                f"served as {nbytes} bytes, the signed manifest says {self.manifest.size}",
            )

    def head(self, data: bytes) -> int:
        if len(data) < PREFIX.size:
            return PREFIX.size
        try:
            end = header_extent(data[: PREFIX.size])
        except DeltaError as e:
            raise RejectedMessage(Reason.UNDECODABLE, str(e)) from None
        if end - PREFIX.size > self.max_header:
            raise RejectedMessage(
                Reason.WRONG_TENSORS,
                f"a header of {end - PREFIX.size} bytes for a model of {len(self.shapes)} "
                f"tensors (at most {self.max_header})",
            )
        if len(data) < end:
            return end
        try:
            info = peek_header(data[:end], max_header=self.max_header)
        except DeltaError as e:
            raise RejectedMessage(Reason.UNDECODABLE, str(e)) from None
        check_header(self.manifest, info)
        try:
            check_layout(info, self.shapes)
        except LayoutMismatch as e:
            raise RejectedMessage(Reason.WRONG_TENSORS, str(e)) from None
        return end


class IndexCheck:
    """Refuses an index blob announced larger than a manifests message may be (a
    `BlobCheck`): a trainer's index is read whole, so its length is bounded first."""

    def size(self, nbytes: int) -> None:
        if nbytes > MAX_MANIFEST_MESSAGE_BYTES:
            raise RejectedMessage(
                Reason.OVERSIZE,
                f"an index of {nbytes} bytes (a manifests message is at most "
                f"{MAX_MANIFEST_MESSAGE_BYTES})",
            )

    def head(self, data: bytes) -> int:
        return 0


def check_header(m: DeltaManifest, info: DeltaInfo) -> None:
    """A payload's header says what its signed manifest says (`MANIFEST_MISMATCH` if not)."""
    said = (
        info.kind,
        -1 if info.from_version is None else info.from_version,
        info.to_version,
        info.result_hash.hex(),
    )
    if said != (m.kind, m.from_version, m.to_version, m.result_hash):
        raise RejectedMessage(
            Reason.MANIFEST_MISMATCH, f"payload header {said[:3]} differs from the manifest"
        )


# --------------------------------------------------------------------------- retries


class Backoff:
    """When something that failed may be tried again: `base_s` after its first failure,
    doubling with each further one up to `cap_s`; forgotten on success.

    At most `max_keys` keys are kept (the oldest failure is forgotten first).
    """

    def __init__(self, base_s: float = 2.0, cap_s: float = 600.0, max_keys: int = 4096) -> None:
        self.base_s = base_s
        self.cap_s = cap_s
        self.max_keys = max_keys
        # key -> (failures, time before which it is not tried again)
        self._state: collections.OrderedDict[Hashable, tuple[int, float]] = (
            collections.OrderedDict()
        )

    def failed(self, key: Hashable, now: float) -> float:
        """Note a failure at `now`; returns the seconds until the next try."""
        failures = self._state.pop(key, (0, 0.0))[0] + 1
        delay = min(self.cap_s, self.base_s * 2 ** min(failures - 1, 62))
        self._state[key] = (failures, now + delay)
        while len(self._state) > self.max_keys:
            self._state.popitem(last=False)
        return delay

    def ready(self, key: Hashable, now: float) -> bool:
        state = self._state.get(key)
        return state is None or now >= state[1]

    def failures(self, key: Hashable) -> int:
        return self._state.get(key, (0, 0.0))[0]

    def succeeded(self, key: Hashable) -> None:
        self._state.pop(key, None)

    def forget(self, keys: Iterable[Hashable]) -> None:
        for key in list(keys):
            self._state.pop(key, None)

    def keys(self) -> list[Hashable]:
        return list(self._state)


class RejectionLimiter:
    """Which refusals of peers' gossip become ledger rows: the first of each (peer, reason)
    in a window of `window_s`; the others are counted, and the next row says how many.

    A peer that floods refusable messages then costs a counter, not a row and a log line
    each. Totals per (peer, reason) stay available (`totals`); at most `max_keys` pairs are
    tracked (the least recent is forgotten first, its total included).
    """

    def __init__(self, window_s: float = 60.0, max_keys: int = 4096) -> None:
        self.window_s = window_s
        self.max_keys = max_keys
        # (peer, reason) -> [time of the last row, refusals counted since it, total]
        self._state: collections.OrderedDict[tuple[str, str], list] = collections.OrderedDict()
        self.unrecorded = 0  # refusals counted and not recorded, over the whole run

    def admit(self, peer: str, reason: str, now: float) -> int | None:
        """None: only count this one. Else record it, and the int says how many were
        counted since the last row of this (peer, reason)."""
        key = (peer, reason)
        state = self._state.pop(key, None) or [-math.inf, 0, 0]
        self._state[key] = state
        while len(self._state) > self.max_keys:
            self._state.popitem(last=False)
        state[2] += 1
        if now - state[0] < self.window_s:
            state[1] += 1
            self.unrecorded += 1
            return None
        counted, state[0], state[1] = state[1], now, 0
        return counted

    def totals(self) -> dict[tuple[str, str], int]:
        """Refusals per (peer, reason) counted so far, recorded or not."""
        return {key: state[2] for key, state in self._state.items()}
