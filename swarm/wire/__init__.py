"""The wire format: every message swarm-node sends to a peer, typed and versioned, in one place.

Each message is a `msgspec.Struct` whose fields are declared in the order they travel, with
their bounds; it has one encode and one decode function here. `docs/PROTOCOL.md` describes
the protocol for implementers in other languages.

Gossip (msgpack)::

    rollouts message  = {"v": 3, "kind": "rollouts", "groups": [[body, signature], ...]}
    manifests message = {"v": 1, "kind": "delta_manifests", "manifests": [[body, signature], ...]}
    announcements     = {"v": 1, "kind": "announcements", "items": [[body, signature], ...]}
    body              = canonical msgpack map of a `RolloutGroup`, `DeltaManifest` or
                        `GroupAnnouncement`

The pull exchange (`swarm.exchange.pull`) serves, over the blob stream, a node's latest
announcements under `ANNOUNCEMENTS_KEY` (with hints of which peers hold each group,
`[content_hash, peer_id, [addr, ...]]`) and each announced group (a `SignedGroup`'s
`[body, signature]`) under `group_key(content_hash)`.

A body is canonical: keys in sorted order (the field order below), floats as float64,
integers in their shortest form, no extension types, so re-encoding the decoded value
gives the same bytes. There is one valid byte string per value, and its SHA-256 names it
(`SignedBody.content_hash`). Signing is `swarm.wire.signing`. The manifests message is also the
body of a trainer's index blob. The payloads of the two stream protocols (peer exchange,
blobs) are in `swarm.wire.streams`.

Decoding is strict: anything unexpected raises `RejectedMessage` with a `Reason`.
Deliberately not here: signatures (`swarm.wire.signing`) or checks that need state or compute
(duplicates, rate limits, rebuilding tasks): see `swarm.verify`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Sequence
from typing import Annotated, ClassVar, Literal, TypeVar

import msgspec
from msgspec import Meta, Struct

from swarm.core.errors import RejectedMessage, TaskError
from swarm.core.reasons import Reason
from swarm.tasks import MAX_SPEC_INDEX, TaskSpec, canonical_config
from swarm.wire.strict import canonical_types, decode_strict, diagnose

# 2: groups declare their format bonus; 3: the bonus is earned only by a completion that ends
# with its tagged answer (`swarm.tasks.well_formatted`), so schema-2 claims no longer match.
SCHEMA_VERSION = 3
MANIFEST_SCHEMA_VERSION = 1
NONCE_BYTES = 16

# Every node uses the same limits (a receiver stricter than a sender would make the sender's
# messages vanish); the gossip message limit of the transport is 1 MiB.
MAX_MESSAGE_BYTES = 512 * 1024  # one gossip message (a batch of groups)
TARGET_MESSAGE_BYTES = 64 * 1024  # batches are cut near this size
MAX_GROUP_BYTES = 256 * 1024  # a group in a gossip message
# A pulled group travels alone over a blob stream, so it may be as large as a real model's:
# 16 completions of 16,384 tokens (5 bytes an id at most) and their text are about 3 MB.
MAX_PULLED_GROUP_BYTES = 4 * 1024 * 1024
MAX_SERVED_GROUP_BYTES = MAX_PULLED_GROUP_BYTES + 128  # a signed group as served
MAX_GROUPS_PER_MESSAGE = 256
MAX_COMPLETIONS = 256
MAX_TEXT_CHARS = 98_304  # one completion (16,384 tokens of about 6 characters) or the question
MAX_NAME_CHARS = 256  # swarm id, sender, model, dataset, hash
MAX_CONFIG_CHARS = 4096
MAX_TOKENS_PER_COMPLETION = 16_384
MAX_COUNT = 2**53  # versions and rounds
REWARD_BOUND = 100.0  # claimed rewards must be finite and within +-this
MAX_FORMAT_BONUS = 1.0  # the same bound as the tasks.format_reward config key
MAX_MANIFEST_BYTES = 2048  # one manifest body (~500 bytes in practice)
MAX_MANIFESTS_PER_MESSAGE = 256  # a trainer's index of the deltas and anchors it serves
MAX_MANIFEST_MESSAGE_BYTES = MAX_MANIFESTS_PER_MESSAGE * (MAX_MANIFEST_BYTES + 96)
MAX_BLOB_KEY_CHARS = 512
MAX_PAYLOAD_BYTES = 1 << 40
MANIFEST_KINDS = ("delta", "anchor")
# 2: an announcement names the signed group exactly as served (`blob_hash` of `[body,
# signature]`, `size` of those bytes), so a holder cannot serve a good body with a bad signature.
ANNOUNCEMENT_SCHEMA_VERSION = 2
MAX_ANNOUNCEMENT_BYTES = 4096  # one announcement body (~600 bytes in practice)
MAX_ANNOUNCEMENTS_PER_MESSAGE = 256
MAX_HOLDER_HINTS = 512  # (group, holder) hints in one announcements message
MAX_HINT_ADDRS = 4
MAX_ANNOUNCEMENTS_MESSAGE_BYTES = MAX_ANNOUNCEMENTS_PER_MESSAGE * (MAX_ANNOUNCEMENT_BYTES + 96) + (
    MAX_HOLDER_HINTS * 1024
)
ANNOUNCEMENTS_KEY = "pull/announcements"  # blob key of a node's latest announcements


def rollout_topic(swarm_id: str) -> str:
    """The gossip topic of a swarm's rollout groups."""
    return f"swarm/{swarm_id}/rollouts/v1"


def delta_topic(swarm_id: str) -> str:
    """The gossip topic of a swarm's delta manifests."""
    return f"swarm/{swarm_id}/deltas/v1"


SYNC_KEY_PREFIX = "sync/"  # every blob key of the delta exchange starts so
PULL_KEY_PREFIX = "pull/"  # and every one of the pull exchange


def index_key(base_hash: str) -> str:
    """Blob key of a trainer's index of served manifests, per base model."""
    return f"sync/{base_hash[:16]}/index"


def payload_key(base_hash: str, kind: str, from_version: int, to_version: int) -> str:
    """Blob key of a delta (`from_version`-`to_version`) or an anchor (at `to_version`)."""
    if kind == "anchor":
        return f"sync/{base_hash[:16]}/anchor/{to_version}"
    return f"sync/{base_hash[:16]}/delta/{from_version}-{to_version}"


def held_key(payload_hash: str) -> str:
    """Blob key under which a follower holding a trainer's delta serves it (by its hash)."""
    return f"sync/held/{payload_hash}"


def have_key(payload_hash: str) -> str:
    """Blob key a trainer serves (one byte) for each payload, so that a follower fetching it
    tells the trainer it now holds that payload (`swarm.sync.holders`)."""
    return f"sync/have/{payload_hash}"


def holders_key(base_hash: str) -> str:
    """Blob key of a trainer's hints of which followers hold its payloads."""
    return f"sync/{base_hash[:16]}/holders"


def group_key(blob_hash: str) -> str:
    """Blob key under which a node serves a signed group: its announced `blob_hash`, the
    SHA-256 of the bytes served (`encode_signed_group`)."""
    return f"pull/group/{blob_hash}"


def new_nonce() -> bytes:
    return os.urandom(NONCE_BYTES)


Name = Annotated[str, Meta(max_length=MAX_NAME_CHARS)]
Text = Annotated[str, Meta(max_length=MAX_TEXT_CHARS)]
Count = Annotated[int, Meta(ge=0, le=MAX_COUNT)]
Time = Annotated[float, Meta(ge=0.0, le=1e12)]
HexHash = Annotated[str, Meta(pattern=r"^[0-9a-f]{64}\Z")]
TokenIds = Annotated[
    tuple[Annotated[int, Meta(ge=0, lt=2**31)], ...], Meta(max_length=MAX_TOKENS_PER_COMPLETION)
]


class Sampling(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The sampling parameters a group was generated with (informational, and for checks)."""

    max_new_tokens: Annotated[int, Meta(ge=1, le=2**31)]
    temperature: Annotated[float, Meta(ge=0.0, le=100.0)]
    top_k: Annotated[int, Meta(ge=0, le=2**31)]
    top_p: Annotated[float, Meta(ge=0.0, le=1.0)]


class RolloutGroup(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One question's completions and claimed rewards, as shared with the swarm.

    Everything a receiver needs to check them: the task spec (so the question and ground
    truth can be rebuilt), the model and policy version that produced them, the sampling
    parameters, the round, a timestamp, a random nonce, and the format bonus the sender's
    verifier adds when a completion ends with its tagged answer.
    """

    base_hash: Name
    completions: Annotated[tuple[Text, ...], Meta(min_length=1, max_length=MAX_COMPLETIONS)]
    created_at: Time
    finished: tuple[bool, ...]  # whether each completion ended with a stop token
    # The bonus the sender's verifier adds for a completion ending with <answer>...</answer>
    # (its tasks.format_reward): receivers recompute each claimed reward with it.
    format_bonus: Annotated[float, Meta(ge=0.0, le=MAX_FORMAT_BONUS)] = 0.0
    model: Name
    nonce: Annotated[bytes, Meta(min_length=NONCE_BYTES, max_length=NONCE_BYTES)] = msgspec.field(
        default_factory=new_nonce
    )
    policy_version: Count
    question: Text
    rewards: tuple[float, ...]  # as claimed by the sender; receivers recompute them
    round: Count
    sampling: Sampling
    sender: Name  # peer ID (12D3KooW...) of the node that generated and signed the group
    swarm_id: Name
    task: TaskSpec
    # The sender's own token ids: only meaningful to peers with the same tokenizer (spot checks).
    token_ids: tuple[TokenIds, ...] = ()
    v: int = SCHEMA_VERSION


class DeltaManifest(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a trainer announces about one delta (version a -> b) or anchor (full weights at b).

    The payload (the `swarm.policy.delta` container) never travels on gossip: the provider
    serves it under `key` over the blob stream, and the signed `payload_hash` (blake3 of the
    payload bytes) and `size` bind the fetched bytes to the manifest.
    """

    base_hash: HexHash  # identity of the base model's bf16 weights (the policy's base_hash)
    created_at: Time
    from_version: Annotated[int, Meta(ge=-1, le=MAX_COUNT)]  # -1 for an anchor
    key: Annotated[str, Meta(max_length=MAX_BLOB_KEY_CHARS)]  # blob key of the payload
    kind: Literal["delta", "anchor"]
    model: Name  # the provider's model identity (`swarm.policy.source.model_identity`)
    payload_hash: HexHash
    provider: Name  # peer ID that serves the payload and signs this manifest
    result_hash: HexHash  # `swarm.policy.delta.weights_hash` of the weights after applying
    size: Annotated[int, Meta(ge=1, le=MAX_PAYLOAD_BYTES)]  # payload bytes
    swarm_id: Name
    to_version: Count  # the version the weights are at after applying
    v: int = MANIFEST_SCHEMA_VERSION


class GroupAnnouncement(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a sender says about one of its groups, so that peers can choose before pulling it.

    The group itself is served under `group_key(blob_hash)`: the served bytes (msgpack
    `[body, signature]`, `encode_signed_group`) must hash to `blob_hash`, be `size` bytes
    long, and the body must agree with every field named here. Hashing the signature too
    pins exactly what may be served: a holder serving anything else (a broken signature
    included) is caught before any decoding, and blamed alone. `seed_salt` binds the task to the
    sender: the task's seed must be `swarm.exchange.pull.stream_seed(sender, seed_salt)`, so
    no peer can announce a group for another sender's task.
    """

    base_hash: Name
    blob_hash: HexHash  # SHA-256 of the signed group as served ([body, signature])
    created_at: Time
    model: Name
    policy_version: Count
    rewards: Annotated[tuple[float, ...], Meta(min_length=1, max_length=MAX_COMPLETIONS)]
    round: Count
    seed_salt: Annotated[int, Meta(ge=0, le=2**63 - 1)]
    sender: Name
    size: Annotated[int, Meta(ge=1, le=MAX_SERVED_GROUP_BYTES)]  # bytes served
    swarm_id: Name
    task: TaskSpec
    v: int = ANNOUNCEMENT_SCHEMA_VERSION


class SignedBody(Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    """Canonical body bytes and the signature over them: `[body, signature]` on the wire."""

    body: bytes
    signature: bytes

    @property
    def content_hash(self) -> str:
        """Hex SHA-256 of the body: the message's identity for dedup and the ledger."""
        return hashlib.sha256(self.body).hexdigest()


class SignedGroup(SignedBody, frozen=True, array_like=True, forbid_unknown_fields=True):
    """A rollout group's canonical body bytes and the sender's signature over them."""


class SignedManifest(SignedBody, frozen=True, array_like=True, forbid_unknown_fields=True):
    """A manifest's canonical body bytes and the provider's signature over them."""


class SignedAnnouncement(SignedBody, frozen=True, array_like=True, forbid_unknown_fields=True):
    """An announcement's canonical body bytes and the sender's signature over them."""


class RolloutsMessage(Struct, frozen=True, forbid_unknown_fields=True):
    """A gossip message on the rollout topic: a batch of signed groups."""

    SCHEMA: ClassVar[int] = SCHEMA_VERSION
    KIND: ClassVar[str] = "rollouts"
    ITEM: ClassVar[str] = "group"
    v: int
    kind: str
    groups: Annotated[list[SignedGroup], Meta(min_length=1, max_length=MAX_GROUPS_PER_MESSAGE)]


class ManifestsMessage(Struct, frozen=True, forbid_unknown_fields=True):
    """A gossip message on the delta topic, or a trainer's index blob: signed manifests."""

    SCHEMA: ClassVar[int] = MANIFEST_SCHEMA_VERSION
    KIND: ClassVar[str] = "delta_manifests"
    ITEM: ClassVar[str] = "manifest"
    v: int
    kind: str
    manifests: Annotated[
        list[SignedManifest], Meta(min_length=1, max_length=MAX_MANIFESTS_PER_MESSAGE)
    ]


class HolderHint(Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    """A peer that fetched one of the announced groups in full, so may serve it too.

    Only a hint: what a holder serves must hash to the announced content hash.
    """

    content_hash: HexHash
    peer_id: Name
    addrs: Annotated[
        tuple[Annotated[str, Meta(max_length=MAX_NAME_CHARS)], ...], Meta(max_length=MAX_HINT_ADDRS)
    ]


class AnnouncementsMessage(Struct, frozen=True, forbid_unknown_fields=True):
    """A node's latest announcements, as served under `ANNOUNCEMENTS_KEY`."""

    SCHEMA: ClassVar[int] = ANNOUNCEMENT_SCHEMA_VERSION
    KIND: ClassVar[str] = "announcements"
    ITEM: ClassVar[str] = "item"
    v: int
    kind: str
    items: Annotated[
        list[SignedAnnouncement], Meta(min_length=0, max_length=MAX_ANNOUNCEMENTS_PER_MESSAGE)
    ]
    holders: Annotated[list[HolderHint], Meta(max_length=MAX_HOLDER_HINTS)] = []


_ENCODER = msgspec.msgpack.Encoder()
S = TypeVar("S", bound=Struct)
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
