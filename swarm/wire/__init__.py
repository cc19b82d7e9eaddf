"""The wire format: every message swarm-node sends to a peer, typed and versioned, in one place.

Each message is a `msgspec.Struct` whose fields are declared in the order they travel, with
their bounds (`swarm.wire.messages`); it has one encode and one decode function
(`swarm.wire.codec`). `docs/PROTOCOL.md` describes the protocol for implementers in other
languages.

Gossip (msgpack)::

    rollouts message  = {"v": 3, "kind": "rollouts", "groups": [[body, signature], ...]}
    manifests message = {"v": 1, "kind": "delta_manifests", "manifests": [[body, signature], ...]}
    announcements     = {"v": 1, "kind": "announcements", "items": [[body, signature], ...]}
    body              = canonical msgpack map of a `RolloutGroup`, `DeltaManifest` or
                        `GroupAnnouncement`

The pull exchange (`swarm.exchange.pull`) serves, over the blob stream, a node's latest
announcements under `ANNOUNCEMENTS_KEY` (with hints of which peers hold each group,
`[content_hash, peer_id, [addr, ...]]`) and each announced group (a `SignedGroup`'s
`[body, signature]`) under `group_key(blob_hash)` (`swarm.wire.keys`). An announced group's
task seed is its sender's `swarm.tasks.stream_seed`.

A body is canonical: keys in sorted order (the field order), floats as float64, integers in
their shortest form, no extension types, so re-encoding the decoded value gives the same
bytes. There is one valid byte string per value, and its SHA-256 names it
(`SignedBody.content_hash`). Signing is `swarm.wire.signing`. The manifests message is also
the body of a trainer's index blob. The payloads of the two stream protocols (peer exchange,
blobs) are in `swarm.wire.streams`; every schema version and size bound is in
`swarm.wire.limits`.

Decoding is strict (`swarm.wire.strict`): anything unexpected raises `RejectedMessage` with a
`Reason`. Deliberately not here: checks that need state or compute (duplicates, rate limits,
rebuilding tasks): see `swarm.verify`.
"""

from __future__ import annotations

from swarm.wire.codec import (
    decode_announcement,
    decode_group,
    decode_manifest,
    decode_signed_group,
    encode_announcement,
    encode_group,
    encode_manifest,
    encode_signed_group,
    pack_announcements,
    pack_manifests,
    pack_messages,
    stored_nonce,
    unpack_announcements,
    unpack_manifests,
    unpack_message,
)
from swarm.wire.keys import (
    ANNOUNCEMENTS_KEY,
    PULL_KEY_PREFIX,
    SYNC_KEY_PREFIX,
    delta_topic,
    group_key,
    have_key,
    held_key,
    holders_key,
    index_key,
    payload_key,
    rollout_topic,
)
from swarm.wire.limits import (
    ANNOUNCEMENT_SCHEMA_VERSION,
    MANIFEST_KINDS,
    MANIFEST_SCHEMA_VERSION,
    MAX_ANNOUNCEMENT_BYTES,
    MAX_ANNOUNCEMENTS_MESSAGE_BYTES,
    MAX_ANNOUNCEMENTS_PER_MESSAGE,
    MAX_BLOB_KEY_CHARS,
    MAX_COMPLETIONS,
    MAX_CONFIG_CHARS,
    MAX_COUNT,
    MAX_FORMAT_BONUS,
    MAX_GROUP_BYTES,
    MAX_GROUPS_PER_MESSAGE,
    MAX_HINT_ADDRS,
    MAX_HOLDER_HINTS,
    MAX_MANIFEST_BYTES,
    MAX_MANIFEST_MESSAGE_BYTES,
    MAX_MANIFESTS_PER_MESSAGE,
    MAX_MESSAGE_BYTES,
    MAX_NAME_CHARS,
    MAX_PAYLOAD_BYTES,
    MAX_PULLED_GROUP_BYTES,
    MAX_SERVED_GROUP_BYTES,
    MAX_TEXT_CHARS,
    MAX_TOKENS_PER_COMPLETION,
    NONCE_BYTES,
    REWARD_BOUND,
    SCHEMA_VERSION,
    TARGET_MESSAGE_BYTES,
)
from swarm.wire.messages import (
    AnnouncementsMessage,
    Count,
    DeltaManifest,
    GroupAnnouncement,
    HexHash,
    HolderHint,
    ManifestsMessage,
    Name,
    RolloutGroup,
    RolloutsMessage,
    Sampling,
    SignedAnnouncement,
    SignedBody,
    SignedGroup,
    SignedManifest,
    Text,
    Time,
    TokenIds,
    new_nonce,
)

__all__ = [
    "ANNOUNCEMENTS_KEY",
    "ANNOUNCEMENT_SCHEMA_VERSION",
    "AnnouncementsMessage",
    "Count",
    "DeltaManifest",
    "GroupAnnouncement",
    "HexHash",
    "HolderHint",
    "MANIFEST_KINDS",
    "MANIFEST_SCHEMA_VERSION",
    "MAX_ANNOUNCEMENTS_MESSAGE_BYTES",
    "MAX_ANNOUNCEMENTS_PER_MESSAGE",
    "MAX_ANNOUNCEMENT_BYTES",
    "MAX_BLOB_KEY_CHARS",
    "MAX_COMPLETIONS",
    "MAX_CONFIG_CHARS",
    "MAX_COUNT",
    "MAX_FORMAT_BONUS",
    "MAX_GROUPS_PER_MESSAGE",
    "MAX_GROUP_BYTES",
    "MAX_HINT_ADDRS",
    "MAX_HOLDER_HINTS",
    "MAX_MANIFESTS_PER_MESSAGE",
    "MAX_MANIFEST_BYTES",
    "MAX_MANIFEST_MESSAGE_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_NAME_CHARS",
    "MAX_PAYLOAD_BYTES",
    "MAX_PULLED_GROUP_BYTES",
    "MAX_SERVED_GROUP_BYTES",
    "MAX_TEXT_CHARS",
    "MAX_TOKENS_PER_COMPLETION",
    "ManifestsMessage",
    "NONCE_BYTES",
    "Name",
    "PULL_KEY_PREFIX",
    "REWARD_BOUND",
    "RolloutGroup",
    "RolloutsMessage",
    "SCHEMA_VERSION",
    "SYNC_KEY_PREFIX",
    "Sampling",
    "SignedAnnouncement",
    "SignedBody",
    "SignedGroup",
    "SignedManifest",
    "TARGET_MESSAGE_BYTES",
    "Text",
    "Time",
    "TokenIds",
    "decode_announcement",
    "decode_group",
    "decode_manifest",
    "decode_signed_group",
    "delta_topic",
    "encode_announcement",
    "encode_group",
    "encode_manifest",
    "encode_signed_group",
    "group_key",
    "have_key",
    "held_key",
    "holders_key",
    "index_key",
    "new_nonce",
    "pack_announcements",
    "pack_manifests",
    "pack_messages",
    "payload_key",
    "rollout_topic",
    "stored_nonce",
    "unpack_announcements",
    "unpack_manifests",
    "unpack_message",
]
