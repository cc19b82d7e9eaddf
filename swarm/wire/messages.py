"""The typed messages: every value swarm-node sends to a peer, as a `msgspec.Struct`.

Fields are declared in the order they travel (sorted keys: the canonical body order), with
their bounds (`swarm.wire.limits`); the signed `[body, signature]` pairs and the gossip
envelopes carrying them are here too. Encoding and decoding are `swarm.wire.codec`'s.
"""

from __future__ import annotations

import hashlib
import os
from typing import Annotated, ClassVar, Literal

import msgspec
from msgspec import Meta, Struct

from swarm.tasks import TaskSpec
from swarm.wire.limits import (
    ANNOUNCEMENT_SCHEMA_VERSION,
    MANIFEST_SCHEMA_VERSION,
    MAX_ANNOUNCEMENTS_PER_MESSAGE,
    MAX_BLOB_KEY_CHARS,
    MAX_COMPLETIONS,
    MAX_COUNT,
    MAX_FAMILY_CHARS,
    MAX_FORMAT_BONUS,
    MAX_GROUPS_PER_MESSAGE,
    MAX_HINT_ADDRS,
    MAX_HOLDER_HINTS,
    MAX_MANIFESTS_PER_MESSAGE,
    MAX_NAME_CHARS,
    MAX_PAYLOAD_BYTES,
    MAX_SERVED_GROUP_BYTES,
    MAX_TEXT_CHARS,
    MAX_TOKENS_PER_COMPLETION,
    NONCE_BYTES,
    SCHEMA_VERSION,
)


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
    sender: the task's seed must be `swarm.tasks.stream_seed(sender, seed_salt)`, so
    no peer can announce a group for another sender's task.
    """

    base_hash: Name
    blob_hash: HexHash  # SHA-256 of the signed group as served ([body, signature])
    created_at: Time
    # The sender's model family (`swarm.policy.source.family_digest`: architecture and
    # tokenizer), so a receiver can skip another family's groups before pulling them. A claim
    # only: nothing in the group can confirm it (a false one costs the receiver what
    # `sharing.shared_from = "any"` would).
    family: Annotated[str, Meta(max_length=MAX_FAMILY_CHARS)] = ""
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
