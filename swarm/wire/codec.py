"""Encoding and decoding every message: canonical bodies, gossip batches, served blobs.

One encode and one decode function per message. A body is canonical (re-encoding the
decoded value gives the same bytes); decoding is strict and rejects anything unexpected
with a `RejectedMessage` and its `Reason` (`swarm.wire.strict`), including what the types
cannot say (one reward per completion, rewards in bounds, a task spec within its limits).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import TypeVar

import msgspec
from msgspec import Struct

from swarm.core.errors import RejectedMessage, TaskError
from swarm.core.reasons import Reason
from swarm.tasks import MAX_SPEC_INDEX, TaskSpec, canonical_config
from swarm.wire.limits import (
    ANNOUNCEMENT_SCHEMA_VERSION,
    MANIFEST_SCHEMA_VERSION,
    MAX_ANNOUNCEMENT_BYTES,
    MAX_ANNOUNCEMENTS_MESSAGE_BYTES,
    MAX_ANNOUNCEMENTS_PER_MESSAGE,
    MAX_COMPLETIONS,
    MAX_CONFIG_CHARS,
    MAX_GROUP_BYTES,
    MAX_GROUPS_PER_MESSAGE,
    MAX_HOLDER_HINTS,
    MAX_MANIFEST_BYTES,
    MAX_MANIFEST_MESSAGE_BYTES,
    MAX_MANIFESTS_PER_MESSAGE,
    MAX_MESSAGE_BYTES,
    MAX_NAME_CHARS,
    MAX_PULLED_GROUP_BYTES,
    MAX_SERVED_GROUP_BYTES,
    MAX_TEXT_CHARS,
    REWARD_BOUND,
    SCHEMA_VERSION,
    TARGET_MESSAGE_BYTES,
)
from swarm.wire.messages import (
    AnnouncementsMessage,
    DeltaManifest,
    GroupAnnouncement,
    HolderHint,
    ManifestsMessage,
    RolloutGroup,
    RolloutsMessage,
    SignedAnnouncement,
    SignedGroup,
    SignedManifest,
)
from swarm.wire.strict import canonical_types, decode_strict, diagnose

_ENCODER = msgspec.msgpack.Encoder()
Envelope = TypeVar("Envelope", RolloutsMessage, ManifestsMessage)


def _encode(value: Struct) -> bytes:
    return _ENCODER.encode(canonical_types(value))


def _malformed(detail: str) -> RejectedMessage:
    return RejectedMessage(Reason.MALFORMED, detail)


# ---------------------------------------------------------------------------------------------
# Rollout groups


def encode_group(group: RolloutGroup) -> bytes:
    """Canonical body bytes of a group."""
    return _encode(group)


def decode_group(body: bytes) -> RolloutGroup:
    """Parse and validate a group body (schema, types, bounds, canonical form); no signature.

    Bounded by the pulled-group limit; a gossip message bounds each of its groups at
    `MAX_GROUP_BYTES` before any is decoded (`unpack_message`)."""
    if len(body) > MAX_PULLED_GROUP_BYTES:
        raise RejectedMessage(Reason.OVERSIZE, f"group body of {len(body)} bytes")
    limit = max(MAX_COMPLETIONS, MAX_TEXT_CHARS)
    group = decode_strict(body, RolloutGroup, SCHEMA_VERSION, limit, _claims_in_order)
    if encode_group(group) != body:
        raise diagnose(
            body, RolloutGroup, SCHEMA_VERSION, limit, _claims_in_order, lambda: _check_group(group)
        )
    _check_group(group)
    return group


def _check_group(group: RolloutGroup) -> None:
    """What the types cannot say: one reward, end flag and token list per completion, claimed
    rewards in bounds (their own reason), a task spec within its limits."""
    n = len(group.completions)
    if len(group.rewards) != n:
        raise _malformed("rewards must be a list with one reward per completion")
    _check_rewards(group.rewards)
    if len(group.finished) != n:
        raise _malformed("finished must be one boolean per completion")
    if len(group.token_ids) not in (0, n):
        raise _malformed("token_ids must be empty or one list per completion")
    _check_task(group.task)


def _check_rewards(rewards: Sequence[object]) -> None:
    for r in rewards:
        if (
            isinstance(r, bool)
            or not isinstance(r, float | int)
            or not math.isfinite(r)
            or abs(r) > REWARD_BOUND
        ):
            raise RejectedMessage(
                Reason.BAD_REWARD, f"reward {r!r} is not a finite number within +-{REWARD_BOUND}"
            )


def _claims_in_order(raw: dict) -> None:
    """For a body that failed to decode: the first of completions and claimed rewards to be
    wrong is what it is rejected for (a bad reward is its own reason, checked before the rest)."""
    completions, rewards = raw["completions"], raw["rewards"]
    if not (isinstance(completions, list) and 1 <= len(completions) <= MAX_COMPLETIONS) or not all(
        isinstance(c, str) and len(c) <= MAX_TEXT_CHARS for c in completions
    ):
        raise _malformed(f"completions must be 1..{MAX_COMPLETIONS} strings")
    if not isinstance(rewards, list) or len(rewards) != len(completions):
        raise _malformed("rewards must be a list with one reward per completion")
    _check_rewards(rewards)


def _check_task(task: TaskSpec) -> None:
    if len(task.dataset) > MAX_NAME_CHARS:
        raise _malformed(f"task.dataset must be a string of at most {MAX_NAME_CHARS} characters")
    if not 0 <= task.seed <= 2**63 - 1 or not 0 <= task.index <= MAX_SPEC_INDEX:
        raise _malformed("task.seed or task.index is out of range")
    text = task.config_json
    try:
        parsed = json.loads(text) if len(text) <= MAX_CONFIG_CHARS else None
        canonical = canonical_config(parsed) if isinstance(parsed, dict) else None
    except (ValueError, RecursionError, TaskError):  # bad JSON, nesting bombs, NaN
        canonical = None
    if canonical != text:
        raise _malformed("task.config must be canonical JSON of an object")


class _StoredNonce(Struct):
    nonce: bytes


def stored_nonce(body: bytes) -> bytes:
    """The nonce of a group body this node already verified and stored (no full decode)."""
    try:
        return msgspec.msgpack.decode(body, type=_StoredNonce).nonce
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise _malformed("stored group body has no nonce") from None


def pack_messages(
    groups: Iterable[SignedGroup], target_bytes: int = TARGET_MESSAGE_BYTES
) -> list[bytes]:
    """Batch signed groups into gossip messages of about `target_bytes` (never over the limit)."""
    messages: list[bytes] = []
    batch: list[SignedGroup] = []
    size = 0
    for group in groups:
        item = len(group.body) + len(group.signature) + 16
        if batch and (size + item > target_bytes or len(batch) >= MAX_GROUPS_PER_MESSAGE):
            messages.append(_pack_batch(batch))
            batch, size = [], 0
        batch.append(group)
        size += item
    if batch:
        messages.append(_pack_batch(batch))
    return messages


def _pack_batch(batch: list[SignedGroup]) -> bytes:
    data = _ENCODER.encode(
        RolloutsMessage(v=SCHEMA_VERSION, kind=RolloutsMessage.KIND, groups=batch)
    )
    if len(data) > MAX_MESSAGE_BYTES:
        raise RejectedMessage(
            Reason.OVERSIZE, f"a single group of {len(data)} bytes exceeds the message limit"
        )
    return data


def unpack_message(data: bytes) -> list[SignedGroup]:
    """Split a gossip message into signed groups. Checks the envelope only."""
    return _unpack_envelope(
        data, RolloutsMessage, MAX_MESSAGE_BYTES, MAX_GROUPS_PER_MESSAGE, MAX_GROUP_BYTES
    )


def _unpack_envelope(
    data: bytes, cls: type[Envelope], max_bytes: int, max_items: int, max_item_bytes: int
) -> list:
    """The signed items of an envelope {"v", "kind", <items>: [[body, signature], ...]}."""
    if len(data) > max_bytes:
        raise RejectedMessage(Reason.OVERSIZE, f"{cls.KIND} message of {len(data)} bytes")
    envelope = decode_strict(data, cls, cls.SCHEMA, max_items + 8, fields_first=True)
    if envelope.kind != cls.KIND:
        raise _malformed(f"unknown message kind {envelope.kind!r}")
    items = getattr(envelope, f"{cls.ITEM}s")
    for item in items:
        if len(item.body) > max_item_bytes:
            raise RejectedMessage(Reason.OVERSIZE, f"{cls.ITEM} body of {len(item.body)} bytes")
    return items


# ---------------------------------------------------------------------------------------------
# Delta manifests


def encode_manifest(manifest: DeltaManifest) -> bytes:
    """Canonical body bytes of a manifest."""
    return _encode(manifest)


def decode_manifest(body: bytes) -> DeltaManifest:
    """Parse and validate a manifest body (schema, types, bounds, canonical form); no signature."""
    if len(body) > MAX_MANIFEST_BYTES:
        raise RejectedMessage(Reason.OVERSIZE, f"manifest body of {len(body)} bytes")
    manifest = decode_strict(body, DeltaManifest, MANIFEST_SCHEMA_VERSION, 64)
    if encode_manifest(manifest) != body:
        raise diagnose(
            body, DeltaManifest, MANIFEST_SCHEMA_VERSION, 64, then=lambda: _check_versions(manifest)
        )
    _check_versions(manifest)
    return manifest


def _check_versions(manifest: DeltaManifest) -> None:
    if manifest.kind == "anchor" and manifest.from_version != -1:
        raise _malformed("an anchor's from_version must be -1")
    if manifest.kind == "delta" and not 0 <= manifest.from_version < manifest.to_version:
        raise _malformed(f"a delta's from_version must be in [0, {manifest.to_version - 1}]")


def pack_manifests(manifests: Iterable[SignedManifest]) -> bytes:
    """One gossip message (or index blob) carrying signed manifests."""
    items = list(manifests)
    if not 1 <= len(items) <= MAX_MANIFESTS_PER_MESSAGE:
        raise ValueError(f"a manifest message carries 1..{MAX_MANIFESTS_PER_MESSAGE} manifests")
    return _ENCODER.encode(
        ManifestsMessage(v=MANIFEST_SCHEMA_VERSION, kind=ManifestsMessage.KIND, manifests=items)
    )


def unpack_manifests(data: bytes) -> list[SignedManifest]:
    """Split a manifest message into signed manifests. Checks the envelope only."""
    return _unpack_envelope(
        data,
        ManifestsMessage,
        MAX_MANIFEST_MESSAGE_BYTES,
        MAX_MANIFESTS_PER_MESSAGE,
        MAX_MANIFEST_BYTES,
    )


# ---------------------------------------------------------------------------------------------
# Group announcements (the pull exchange)


def encode_announcement(announcement: GroupAnnouncement) -> bytes:
    """Canonical body bytes of an announcement."""
    return _encode(announcement)


def decode_announcement(body: bytes) -> GroupAnnouncement:
    """Parse and validate an announcement body (schema, types, bounds, canonical); no signature."""
    if len(body) > MAX_ANNOUNCEMENT_BYTES:
        raise RejectedMessage(Reason.OVERSIZE, f"announcement body of {len(body)} bytes")
    claims = _announced_rewards
    announcement = decode_strict(body, GroupAnnouncement, ANNOUNCEMENT_SCHEMA_VERSION, 512, claims)
    if encode_announcement(announcement) != body:
        raise diagnose(
            body,
            GroupAnnouncement,
            ANNOUNCEMENT_SCHEMA_VERSION,
            512,
            claims,
            lambda: _check_announcement(announcement),
        )
    _check_announcement(announcement)
    return announcement


def _announced_rewards(raw: dict) -> None:
    rewards = raw["rewards"]
    if not isinstance(rewards, list) or not 1 <= len(rewards) <= MAX_COMPLETIONS:
        raise _malformed(f"rewards must be 1..{MAX_COMPLETIONS} numbers")
    _check_rewards(rewards)


def _check_announcement(announcement: GroupAnnouncement) -> None:
    _check_rewards(announcement.rewards)
    _check_task(announcement.task)


def pack_announcements(
    items: Iterable[SignedAnnouncement], holders: Iterable[HolderHint] = ()
) -> bytes:
    """The message a node serves under `ANNOUNCEMENTS_KEY` (possibly empty)."""
    batch = list(items)[-MAX_ANNOUNCEMENTS_PER_MESSAGE:]
    hints = list(holders)[:MAX_HOLDER_HINTS]
    return _ENCODER.encode(
        AnnouncementsMessage(
            v=ANNOUNCEMENT_SCHEMA_VERSION,
            kind=AnnouncementsMessage.KIND,
            items=batch,
            holders=hints,
        )
    )


def unpack_announcements(data: bytes) -> tuple[list[SignedAnnouncement], list[HolderHint]]:
    """Split an announcements message into signed announcements and holder hints.

    Checks the envelope only (each announcement is checked by `decode_announcement`)."""
    cls = AnnouncementsMessage
    if len(data) > MAX_ANNOUNCEMENTS_MESSAGE_BYTES:
        raise RejectedMessage(Reason.OVERSIZE, f"{cls.KIND} message of {len(data)} bytes")
    limit = max(MAX_ANNOUNCEMENTS_PER_MESSAGE, MAX_HOLDER_HINTS) + 8
    envelope = decode_strict(data, cls, cls.SCHEMA, limit, fields_first=True)
    if envelope.kind != cls.KIND:
        raise _malformed(f"unknown message kind {envelope.kind!r}")
    for item in envelope.items:
        if len(item.body) > MAX_ANNOUNCEMENT_BYTES:
            raise RejectedMessage(Reason.OVERSIZE, f"announcement body of {len(item.body)} bytes")
    return envelope.items, envelope.holders


def encode_signed_group(signed: SignedGroup) -> bytes:
    """A signed group as served under `group_key`: msgpack `[body, signature]`."""
    return _ENCODER.encode(signed)


def decode_signed_group(data: bytes) -> SignedGroup:
    """A served signed group (envelope only: the body is checked by `decode_group`)."""
    if len(data) > MAX_SERVED_GROUP_BYTES:
        raise RejectedMessage(Reason.OVERSIZE, f"served group of {len(data)} bytes")
    try:
        return msgspec.msgpack.decode(data, type=SignedGroup)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as e:
        raise RejectedMessage(Reason.UNDECODABLE, f"served group: {e}") from None
