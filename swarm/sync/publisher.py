"""A trainer's side of following: encode, serve and announce a sparse delta after each update.

A trainer with `sync.publish_deltas` runs a `DeltaPublisher`: after each update it encodes
the change of its bf16 weights (`swarm.policy.delta`), serves the payload over the blob
stream protocol, and announces it on the swarm's delta topic in a signed `DeltaManifest`.
It keeps serving its last `keep_deltas` deltas, a full anchor every `anchor_every`
versions (the latest one only), and an *index*: one blob listing the signed manifests of
everything it serves, so a follower that missed announcements can catch up. It also names
the followers that hold each payload, so the others fetch from them rather than from it
(`swarm.sync.holders`). The rules both sides share are `swarm.sync.rules`; the
follower is `swarm.sync.follower`.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import blake3
import torch

from swarm.core.errors import SwarmError, TransportError
from swarm.core.reasons import Direction, Status
from swarm.p2p.transport import Transport
from swarm.policy.delta import encode_anchor, encode_delta, read_header
from swarm.sync.holders import HAVE_PREFIX, HolderRegistry
from swarm.sync.rules import DeltaEvent, manifest_event
from swarm.wire import (
    SYNC_KEY_PREFIX,
    DeltaManifest,
    SignedManifest,
    delta_topic,
    have_key,
    index_key,
    pack_manifests,
    payload_key,
)
from swarm.wire.signing import sign_manifest


@dataclass
class _Served:
    manifest: DeltaManifest
    signed: SignedManifest


class DeltaPublisher:
    """Trainer side: encode, serve and announce a delta after each update.

    `publish(weights, version)` takes the trainer's bf16 view (`bf16_state_dict(model)`);
    the previous view is kept as the base of the next delta. Errors in encoding are bugs
    of this node and propagate; a failed gossip publish is only counted (followers find
    the delta in the index).
    """

    def __init__(
        self,
        transport: Transport,
        key_pair,
        *,
        peer_id: str,
        swarm_id: str,
        model: str,
        base_hash: str,
        anchor_every: int,
        keep_deltas: int,
        level: int = 1,
        threads: int | None = None,
        clock: Callable[[], float] = time.time,
        refresh_holders_s: float = 0.0,
    ) -> None:
        self.transport = transport
        self.refresh_holders_s = refresh_holders_s  # > 0: holder hints refreshed that often
        self.key_pair = key_pair
        self.peer_id = peer_id
        self.swarm_id = swarm_id
        self.model = model
        self.base_hash = base_hash
        self.anchor_every = anchor_every
        self.keep_deltas = keep_deltas
        self.level = level
        self.threads = threads
        self.clock = clock
        self.topic = delta_topic(swarm_id)
        self.publish_failures = 0
        self._weights: dict[str, torch.Tensor] | None = None
        self._version = -1
        self._deltas: collections.deque[_Served] = collections.deque()
        self._anchor: _Served | None = None
        # Payload keys of recent deltas and anchors, so a fetch that completes after its blob
        # was rotated out still counts as served.
        self._recent: collections.OrderedDict[str, DeltaManifest] = collections.OrderedDict()
        self.holders = HolderRegistry(transport, base_hash)  # followers that hold payloads

    @property
    def version(self) -> int:
        return self._version

    def start(self, weights: Mapping[str, torch.Tensor], version: int) -> list[DeltaEvent]:
        """Take `weights` (bf16) at `version` as the reference. A trainer resumed past the
        base model serves an anchor right away, so followers need not wait for the next one."""
        self._weights, self._version = dict(weights), version
        if self.refresh_holders_s > 0:
            self.holders.run_every(self.refresh_holders_s)
        events = [self._serve_anchor()[0]] if version > 0 else []
        self._announce([s for s in [self._anchor] if s is not None and version > 0])
        return events

    def publish(self, weights: Mapping[str, torch.Tensor], version: int) -> list[DeltaEvent]:
        """Publish the change from the previous weights to `weights` at `version`."""
        if self._weights is None:
            raise RuntimeError("DeltaPublisher.publish before start")
        if version <= self._version:
            return []
        t0 = time.perf_counter()
        blob = encode_delta(
            self._weights,
            weights,
            from_version=self._version,
            to_version=version,
            level=self.level,
            threads=self.threads,
        )
        served = self._serve("delta", self._version, version, blob)
        events = [self._event(served, time.perf_counter() - t0)]
        self._deltas.append(served)
        while len(self._deltas) > self.keep_deltas:
            old = self._deltas.popleft().manifest
            self.transport.unserve_blob(old.key)
            self.transport.unserve_blob(have_key(old.payload_hash))
        self._weights, self._version = dict(weights), version
        fresh = [served]
        if version % self.anchor_every == 0:
            event, anchor = self._serve_anchor()
            events.append(event)
            fresh.append(anchor)
        self._announce(fresh)
        return events

    def served_events(self) -> list[DeltaEvent]:
        """Deltas and anchors that followers fetched in full since the last call.

        Fetches of the manifest index, and of keys this publisher never served, are not
        deliveries of weights and are left out.
        """
        events, holding = [], []
        for fetch in self.transport.served_blobs(SYNC_KEY_PREFIX):
            if fetch.key.startswith(HAVE_PREFIX):  # a follower that now holds a payload
                holding.append((fetch, fetch.key[len(HAVE_PREFIX) :]))
                continue
            m = self._recent.get(fetch.key)
            if m is not None:
                holding.append((fetch, m.payload_hash))
                events.append(
                    manifest_event(
                        m, Direction.SENT, Status.SERVED, peer=fetch.peer_id, nbytes=fetch.nbytes
                    )
                )
        self.holders.note(holding)
        return events

    def served(self) -> list[DeltaManifest]:
        """Manifests of what is being served now (the latest anchor first, then the deltas)."""
        return [s.manifest for s in ([self._anchor] if self._anchor else []) + list(self._deltas)]

    def _serve_anchor(self) -> tuple[DeltaEvent, _Served]:
        t0 = time.perf_counter()
        if self._weights is None:
            raise SwarmError("no weights to anchor: start() was not called")
        blob = encode_anchor(
            self._weights, version=self._version, level=self.level, threads=self.threads
        )
        served = self._serve("anchor", -1, self._version, blob)
        if self._anchor is not None:
            self.transport.unserve_blob(self._anchor.manifest.key)
            self.transport.unserve_blob(have_key(self._anchor.manifest.payload_hash))
        self._anchor = served
        return self._event(served, time.perf_counter() - t0), served

    def _serve(
        self, kind: Literal["delta", "anchor"], from_version: int, to_version: int, blob: bytes
    ) -> _Served:
        header = read_header(blob)
        manifest = DeltaManifest(
            swarm_id=self.swarm_id,
            provider=self.peer_id,
            model=self.model,
            base_hash=self.base_hash,
            kind=kind,
            from_version=from_version,
            to_version=to_version,
            size=len(blob),
            payload_hash=blake3.blake3(blob).hexdigest(),
            result_hash=header.result_hash.hex(),
            key=payload_key(self.base_hash, kind, from_version, to_version),
            created_at=self.clock(),
        )
        self.transport.serve_blob(manifest.key, blob)
        self.transport.serve_blob(have_key(manifest.payload_hash), b"1")
        self._recent[manifest.key] = manifest
        while len(self._recent) > 4 * (self.keep_deltas + 1):
            self._recent.popitem(last=False)
        return _Served(manifest, sign_manifest(manifest, self.key_pair))

    def _announce(self, fresh: list[_Served]) -> None:
        everything = ([self._anchor] if self._anchor else []) + list(self._deltas)
        if everything:
            self.transport.serve_blob(
                index_key(self.base_hash), pack_manifests(s.signed for s in everything)
            )
        if not fresh:
            return
        try:
            self.transport.publish(self.topic, pack_manifests(s.signed for s in fresh))
        except TransportError:
            self.publish_failures += 1  # followers still find it in the index

    @staticmethod
    def _event(served: _Served, seconds: float) -> DeltaEvent:
        return manifest_event(
            served.manifest, Direction.SENT, Status.PUBLISHED, peer="", seconds=seconds
        )
